"""Controllers: reconcilers, one module per owned resource, over a small runtime in ``runtime``."""
