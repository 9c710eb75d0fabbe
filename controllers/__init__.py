"""Controllers: reconcilers, one module per owned resource, over a small runtime in ``runtime``.

:data:`CONTROLLERS` lists every controller the worker runs (``module:Class``), imported when the
worker starts; a controller module needs no other registration.
"""

CONTROLLERS: list[str] = []
