#!/usr/bin/env bash
# What the container nodes and `make images` need, from Debian's packages: containerd and runc (the
# nodes' runtime), the CNI plugins (their Pod network), socat (the apiserver relay into a node's
# network namespace), mmdebstrap and umoci (images built without Docker or a registry),
# busybox-static (the sandbox image). One line naming what could not be installed, exit 1.
set -euo pipefail
declare -A tool=(
  [containerd]=containerd [runc]=runc [ctr]=containerd [socat]=socat [mmdebstrap]=mmdebstrap
  [umoci]=umoci [busybox]=busybox-static [/usr/lib/cni/bridge]=containernetworking-plugins
)
missing=()
for cmd in "${!tool[@]}"; do
  if [[ $cmd == /* ]]; then [ -x "$cmd" ] || missing+=("${tool[$cmd]}"); else command -v "$cmd" >/dev/null || missing+=("${tool[$cmd]}"); fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1; }; }; then
  echo "ensure-container-tools: could not install Debian package(s) ${packages[*]} (is a Debian mirror reachable?)" >&2
  exit 1
fi
