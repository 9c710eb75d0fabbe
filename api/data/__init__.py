"""Data files shipped with the api package (``unit_presets.yaml``)."""
