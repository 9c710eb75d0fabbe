"""The ``gpustack-operator`` binary: its command line and process-wide plumbing (logs)."""

from api import OPERATOR_VERSION as __version__

__all__ = ["__version__"]
