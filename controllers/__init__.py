"""Controllers: reconcilers, one module per owned resource, over a small runtime in ``runtime``.

:data:`CONTROLLERS` lists every controller the worker runs (``module:Class``), imported when the
worker starts; a controller module needs no other registration.
"""

CONTROLLERS: list[str] = [
    # The scheduling chain, gates 2 and 4: pools, queues, InstanceTypes and node counting keys.
    "controllers.resource_flavors:ResourceFlavorReconciler",
    "controllers.instance_types:InstanceTypeReconciler",
    "controllers.cluster_queues:ClusterQueueReconciler",
    "controllers.local_queues:LocalQueueReconciler",
    "controllers.node_capacity_keys:NodeCapacityReconciler",
    "controllers.devices_labels:DevicesLabelReconciler",
    # Per-card fit labels the Workload fit pin reads (§6.6).
    "controllers.node_fit_labels:NodeFitLabelReconciler",
    # Gate 3: the per-card AdmissionCheck gpustack-node-devices.
    "controllers.node_devices_check:NodeDevicesCheck",
]
