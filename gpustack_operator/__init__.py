"""The ``gpustack-operator`` binary: its command line and process-wide plumbing (logs)."""

__version__ = "0.1.0"
