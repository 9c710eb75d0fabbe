"""RDMA in the device manager (spec part C): the network-interface inventory, link verdicts, the
``feature.gpustack.ai/rdma.*`` labels and the three RDMA device-plugin keys.

Pure decisions and I/O are kept apart:

- :mod:`.sysfs` — the only module that reads sysfs: every path resolved component by component and
  refused when it leaves the root, every attribute read capped at 64 KiB (I/O edge);
- :mod:`.netlink` — link facts (MTU, operational state) through ``pyroute2`` (I/O edge);
- :mod:`.pci` — the PCI bridge walk shared with the accelerator side (``pciRootId``, ``pciSwitches``);
- :mod:`.link` — the link verdict table (C.2) and the first-seen merge;
- :mod:`.discovery` — one pass over ``/sys/class/net`` into ``Devices.spec.interfaces[]`` records;
- :mod:`.inventory` — the recorded list: failures keep it, first-seen times merged, change detection;
- :mod:`.labels` — ``rdma.capable``, ``rdma.distance`` (the bus-distance rules), ``rdma.numa``;
- :mod:`.endpoints` — which endpoints each key serves, their tokens, health and NUMA hints (C.4, C.5);
- :mod:`.allocate` — what ``Allocate`` hands a container (C.6);
- :mod:`.plugin` — the gRPC device-plugin server of one RDMA key.
"""
