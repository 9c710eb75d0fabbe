"""Controllers: reconcilers, one module per owned resource, over a small runtime in ``runtime``.

:data:`CONTROLLERS` lists every controller the worker runs (``module:Class``), imported when the
worker starts; a controller module needs no other registration.
"""

CONTROLLERS: list[str] = [
    # Gate 3: the per-card AdmissionCheck gpustack-node-devices.
    "controllers.node_devices_check:NodeDevicesCheck",
]
