"""Node agents: the device manager (accelerators, RDMA, device plugin) and the model manager (CSI)."""
