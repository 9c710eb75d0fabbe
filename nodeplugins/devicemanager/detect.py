"""``gpustack-operator device-manager detect``: one detection pass, printed, nothing written.

Prints one JSON object: ``{"manufacturer", "driverVersion", "runtimeVersion", "spec": {"groups"},
"labels"}`` — the ``Devices`` spec and the NodeFeature labels ``serve`` would publish.  Exit 1 when
the pass fails (the driver did not answer), 0 otherwise (an empty list is an answer).
"""

from __future__ import annotations

import argparse
import json
import sys

from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.backends import DiscoveryError, backend_for


def run(args: argparse.Namespace) -> int:
    node = args.node_name or "localhost"
    try:
        inventory = backend_for(args.manufacturer, simulate=args.simulate, node=node).discover()
    except (DiscoveryError, ValueError) as error:
        print(f"device-manager detect: {error}", file=sys.stderr)
        return 1
    groups = devices.canonical_groups(devices.spec_groups(inventory))
    out = {
        "manufacturer": inventory.manufacturer,
        "driverVersion": inventory.driver_version,
        "runtimeVersion": inventory.runtime_version,
        "spec": {"groups": groups},
        "labels": devices.feature_labels([inventory]),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
