"""Image references of the operator's own containers, rewritten by the ``container-namespace`` and
``container-registry`` Settings (the ``sshd`` sidecar, built-in applications).

A reference is ``[host/]path[:tag][@digest]``; its first component is a host when it holds a ``.``
or a ``:`` or is ``localhost`` (Docker's rule).  ``container-namespace`` replaces the first
segment of the path (``gpustack/ssh-server`` → ``mirror/ssh-server``; a one-segment path gains it:
``busybox`` → ``mirror/busybox``); then ``container-registry`` becomes the host, replacing one
the reference named (``gpustack/ssh-server`` → ``registry.local:5000/gpustack/ssh-server``).
Blank Settings leave the reference as it is.
"""

from __future__ import annotations

from typing import Final

from api import setting_names

SETTING_CONTAINER_REGISTRY: Final = setting_names.CONTAINER_REGISTRY
SETTING_CONTAINER_NAMESPACE: Final = setting_names.CONTAINER_NAMESPACE


def _has_host(first: str) -> bool:
    return "." in first or ":" in first or first == "localhost"


def split(reference: str) -> tuple[str, str, str]:
    """``(host, path, suffix)``: suffix is the ``:tag`` and/or ``@digest`` part, verbatim."""
    head, at, digest = reference.partition("@")
    parts = head.split("/")
    host = parts[0] if len(parts) > 1 and _has_host(parts[0]) else ""
    rest = parts[1:] if host else parts
    last = rest[-1]
    name, colon, tag = last.partition(":")
    path = "/".join([*rest[:-1], name])
    suffix = (f":{tag}" if colon else "") + (f"@{digest}" if at else "")
    return host, path, suffix


def rewrite(reference: str, *, registry: str = "", namespace: str = "") -> str:
    """``reference`` under the two Settings (blank values change nothing)."""
    registry, namespace = registry.strip().rstrip("/"), namespace.strip().strip("/")
    if not registry and not namespace:
        return reference
    host, path, suffix = split(reference)
    if namespace:
        segments = path.split("/")
        path = "/".join([namespace, *segments[1:]]) if len(segments) > 1 else f"{namespace}/{path}"
    if registry:
        host = registry
    return f"{host}/{path}{suffix}" if host else f"{path}{suffix}"
