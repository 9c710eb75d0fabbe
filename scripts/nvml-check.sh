#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: run the device manager's NVIDIA discovery against the real NVML
# library (libnvidia-ml.so.1, through pynvml) and print the Devices spec and node-feature labels it
# would publish. Nothing is written anywhere (but by --mig-roundtrip). Not part of the test suite
# (it needs a GPU).
#
#   scripts/nvml-check.sh                       # real NVML
#   scripts/nvml-check.sh --simulate PROFILE    # the same pass on a simulated node profile
#   scripts/nvml-check.sh --mig-roundtrip       # ALSO WRITES: on the first card in MIG mode, create
#                                               # one instance of its smallest profile at a free
#                                               # placement the way Allocate does (GPU instance +
#                                               # one compute instance covering it), check it is
#                                               # alive with its MIG UUID, destroy it (needs root)
#
# Exit 0 with the JSON on stdout; 1 when NVML does not answer (no driver, no library), or when the
# round trip finds no MIG card or fails (the NVML error is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || scripts/bootstrap.sh >&2
if [[ $# -eq 0 || "${1:-}" == "--mig-roundtrip" ]]; then
    if ! .venv/bin/python -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
        echo "nvml-check: libnvidia-ml.so.1 cannot be loaded: no NVIDIA driver on this machine" >&2
        exit 1
    fi
    command -v nvidia-smi >/dev/null && nvidia-smi -L >&2 || true
fi
if [[ "${1:-}" == "--mig-roundtrip" ]]; then
    exec .venv/bin/python - <<'PY'
import json
import sys

from nodeplugins.devicemanager.backends.mig import NvmlMig
from nodeplugins.devicemanager.backends.nvidia import NvidiaBackend
from nodeplugins.devicemanager.partitions import PartitionError

cards = [c for c in NvidiaBackend().discover().cards if c.partitioned and c.profiles]
if not cards:
    sys.exit("nvml-check: no card is in MIG mode (nvidia-smi -i <id> -mig 1, then re-run)")
card = cards[0]
profile = min(card.profiles, key=lambda p: (p.memory_slices, p.compute_slices))
mig = NvmlMig()
taken = [(i.start, i.length) for i in mig.instances(card.id)]
free = [(s, n) for s, n in profile.placements if not any(s < a + b and a < s + n for a, b in taken)]
if not free:
    sys.exit(f"nvml-check: card {card.id} has no free placement of {profile.name}")
try:
    instance = mig.create(card.id, profile.name, *free[0])
    alive = mig.alive(instance)
    destroyed = mig.destroy(instance)
    gone = not mig.alive(instance)
except PartitionError as error:
    sys.exit(f"nvml-check: {error}")
print(json.dumps({"card": card.id, "profile": profile.name, "placement": free[0], "device": instance.device,
                  "alive": alive, "destroyed": destroyed, "gone": gone}, indent=1))
sys.exit(0 if alive and destroyed and gone else 1)
PY
fi
exec .venv/bin/python -m gpustack_operator device-manager detect --manufacturer nvidia \
    --node-name "${NODE_NAME:-$(hostname)}" "$@"
