#!/usr/bin/env bash
# The real Mooncake store the KV-cache tests and `make dev` run on loopback, cached under ~/.cache.
#
#   scripts/ensure-mooncake.sh            # install if missing; print the bin dir
#   scripts/ensure-mooncake.sh --bin-dir  # print the bin dir only (may not exist yet)
#
# What it installs, into ~/.cache/gpustack-operator/mooncake/<version>/:
#   venv/  the PyPI wheel mooncake-transfer-engine-non-cuda (no CUDA), installed --no-deps into its own
#          venv: it ships mooncake_master, mooncake_client (a store member that mounts a DRAM segment)
#          and the Python client (mooncake.store) tests use to write under a tenant, as engines do.
#   lib/   Debian's libibverbs1 (and libnl-3-200, libnl-route-3-200 it needs), unpacked from the
#          .deb (apt-get download; nothing is installed system-wide): the binaries link libibverbs
#          even when they only ever speak TCP.
#   bin/   mooncake_master, mooncake_client, python: wrappers that point LD_LIBRARY_PATH at lib/;
#          mc_store_rest_server: the member program the backend image runs (the wheel's
#          mooncake.mooncake_store_service), with aiohttp, its one dependency, added to the venv
#          (stamp .member-program, so a cache finished before it gains it on the next run).
# The version is the store of the default backend image (Setting kv-cache-backend-image,
# gpustack/mirrored-mooncake:0.3.13.post1-cpu), so the tests speak to the master users run.
set -euo pipefail
VERSION=${GPUSTACK_MOONCAKE_VERSION:-0.3.13.post1}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gpustack-operator/mooncake/$VERSION
PYTHON=${PYTHON:-python3}
DEBS=(libibverbs1 libnl-3-200 libnl-route-3-200)

if [ "${1:-}" = "--bin-dir" ]; then
  echo "$CACHE/bin"
  exit 0
fi
AIOHTTP=${GPUSTACK_MOONCAKE_AIOHTTP:-aiohttp==3.14.5}

# The member program: mc_store_rest_server, as the image names it (under the lock, idempotent).
member_program() {
  if [ ! -f "$CACHE/.member-program" ]; then
    "$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check "$AIOHTTP" >&2
    cat >"$CACHE/bin/mc_store_rest_server" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$CACHE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$CACHE/venv/bin/python" -m mooncake.mooncake_store_service "\$@"
WRAPPER
    chmod +x "$CACHE/bin/mc_store_rest_server"
    "$CACHE/bin/python" -c 'import aiohttp, mooncake.mooncake_store_service' >&2
    touch "$CACHE/.member-program"
  fi
}

if [ -f "$CACHE/.complete" ] && [ -f "$CACHE/.member-program" ]; then
  echo "$CACHE/bin"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$CACHE/.complete" ]; then  # finished by another run (or before the member program existed)
  member_program
  echo "$CACHE/bin"
  exit 0
fi
rm -rf "$CACHE/venv" "$CACHE/lib" "$CACHE/bin" "$CACHE/debs"

# The wheel, through pip's own cache.
"$PYTHON" -m venv "$CACHE/venv"
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
  "mooncake-transfer-engine-non-cuda==$VERSION" >&2
PKG=$("$CACHE/venv/bin/python" -c 'import importlib.util as u; print(u.find_spec("mooncake").submodule_search_locations[0])')

# Debian's libraries, unpacked (apt keeps its own copy of the .deb under /var/cache/apt too).
mkdir -p "$CACHE/debs" "$CACHE/root"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
(cd "$CACHE/debs" && { apt-get download -q "${DEBS[@]}" >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null && apt-get download -q "${DEBS[@]}" >/dev/null; }; })
for deb in "$CACHE"/debs/*.deb; do dpkg-deb -x "$deb" "$CACHE/root"; done
mkdir -p "$CACHE/lib"
find "$CACHE/root" -name '*.so*' -exec cp -a {} "$CACHE/lib/" \;
rm -rf "$CACHE/root"

mkdir -p "$CACHE/bin"
for tool in mooncake_master mooncake_client; do
  cat >"$CACHE/bin/$tool" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$CACHE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$PKG/$tool" "\$@"
EOF
  chmod +x "$CACHE/bin/$tool"
done
cat >"$CACHE/bin/python" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$CACHE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$CACHE/venv/bin/python" "\$@"
EOF
chmod +x "$CACHE/bin/python"

# Every library the binaries need must resolve now, or the tests would fail obscurely later.
for tool in mooncake_master mooncake_client; do
  missing=$(LD_LIBRARY_PATH="$CACHE/lib" ldd "$PKG/$tool" | awk '/not found/ {print $1}' | sort -u)
  if [ -n "$missing" ]; then
    echo "ensure-mooncake: $tool still lacks: $missing (install the Debian packages that provide them)" >&2
    exit 1
  fi
done
"$CACHE/bin/python" -c 'import mooncake.store' >&2
"$CACHE/bin/mooncake_master" --version >/dev/null 2>&1 || true
touch "$CACHE/.complete"
member_program
echo "$CACHE/bin"
