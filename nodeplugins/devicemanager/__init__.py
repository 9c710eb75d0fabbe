"""The device manager: discovers accelerators and RDMA interfaces, keeps the node's ``Devices``
ledger and NodeFeature labels, and serves the kubelet device-plugin API."""
