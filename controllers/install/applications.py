"""The applications the worker could install itself (image mode) and ``--disable-applications``.

Apart from :mod:`controllers.install.plan` so the command line reads them without importing the
plan's renderers and the Kubernetes client (every ``gpustack-operator`` command builds the worker's
flags).
"""

from __future__ import annotations

from collections.abc import Iterable

APPLICATIONS = (
    "kueue",
    "node-feature-discovery",
    "csi-driver-nfs",
    "csi-driver-s3",
    "device-manager",
    "model-manager",
)


def enabled_applications(disabled: Iterable[str]) -> list[str]:
    """The applications ``--disable-applications`` leaves the worker to install (none with ``*``)."""
    names = set(disabled)
    if "*" in names:
        return []
    return [app for app in APPLICATIONS if app not in names]


def unknown_applications(disabled: Iterable[str]) -> list[str]:
    return sorted(set(disabled) - {"*", *APPLICATIONS})
