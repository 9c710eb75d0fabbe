#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: run the device manager's NVIDIA discovery against the real NVML
# library (libnvidia-ml.so.1, through pynvml) and print the Devices spec and node-feature labels it
# would publish. Nothing is written anywhere. Not part of the test suite (it needs a GPU).
#
#   scripts/nvml-check.sh                       # real NVML
#   scripts/nvml-check.sh --simulate PROFILE    # the same pass on a simulated node profile
#
# Exit 0 with the JSON on stdout; 1 when NVML does not answer (no driver, no library).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || scripts/bootstrap.sh >&2
if [[ $# -eq 0 ]]; then
    if ! .venv/bin/python -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
        echo "nvml-check: libnvidia-ml.so.1 cannot be loaded: no NVIDIA driver on this machine" >&2
        exit 1
    fi
    command -v nvidia-smi >/dev/null && nvidia-smi -L >&2 || true
fi
exec .venv/bin/python -m gpustack_operator device-manager detect --manufacturer nvidia \
    --node-name "${NODE_NAME:-$(hostname)}" "$@"
