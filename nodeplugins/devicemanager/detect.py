"""``gpustack-operator device-manager detect``: one detection pass, printed, nothing written.

Prints one JSON object: ``{"manufacturer", "driverVersion", "runtimeVersion", "spec": {"groups",
"interfaces"}, "labels"}`` — the ``Devices`` spec and the NodeFeature labels ``serve`` would
publish, the network interfaces and their link verdicts read by the same pass ``serve`` runs.  Exit
1 when the accelerator pass fails (the driver did not answer), 0 otherwise (an empty list is an
answer); an interface enumeration that fails leaves ``interfaces`` out and is logged.
"""

from __future__ import annotations

import argparse
import json
import sys

from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.backends import DiscoveryError, backend_for
from nodeplugins.devicemanager.rdma.service import RdmaService


def run(args: argparse.Namespace) -> int:
    node = args.node_name or "localhost"
    try:
        inventory = backend_for(args.manufacturer, simulate=args.simulate, node=node).discover()
    except (DiscoveryError, ValueError) as error:
        print(f"device-manager detect: {error}", file=sys.stderr)
        return 1
    rdma = RdmaService(args.sysfs_root, netns=args.netns)
    rdma.refresh()
    places = rdma.pci_places(devices.pci_addresses(inventory))
    groups = devices.canonical_groups(devices.spec_groups(inventory, places=places))
    spec: dict = {"groups": groups}
    if (interfaces := rdma.spec_interfaces()) is not None:
        spec["interfaces"] = interfaces
    out = {
        "manufacturer": inventory.manufacturer,
        "driverVersion": inventory.driver_version,
        "runtimeVersion": inventory.runtime_version,
        "spec": spec,
        "labels": {**devices.node_labels(inventory, groups), **rdma.labels(groups, {})},
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
