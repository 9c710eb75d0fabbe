"""Upstream ``.proto`` files the node agents speak, and the Python generated from them.

- ``kubelet/deviceplugin/v1beta1/api.proto`` — the kubelet device-plugin API (device manager)
- ``kubelet/pluginregistration/v1/api.proto`` — kubelet plugin registration (CSI node plugin)
- ``kubelet/podresources/v1/api.proto`` — the kubelet pod-resources API (container identification)
- ``csi/v1/csi.proto`` — the Container Storage Interface (model manager)

The files are copied unchanged from ``k8s.io/kubelet@v0.36.3`` and
``github.com/container-storage-interface/spec@v1.13.0`` (Apache-2.0, see ``LICENSE``), with a header
naming their origin.  ``python -m nodeplugins.protos.generate`` (run by ``scripts/bootstrap.sh``)
writes ``*_pb2.py``, ``*_pb2_grpc.py`` and ``*.pyi`` beside each file with ``grpcio-tools``; they are
build outputs, not committed.  Import them through :func:`load`, which says what to run when they are
missing.
"""

from __future__ import annotations

import importlib
from typing import Any

GENERATE_HINT = "run scripts/bootstrap.sh (or: python -m nodeplugins.protos.generate)"


class ProtosNotGenerated(ImportError):
    """The generated gRPC modules are absent: the build step was skipped."""


def load(module: str) -> Any:
    """``load("kubelet.deviceplugin.v1beta1.api_pb2")`` — a generated module of this package (typed
    ``Any``: generated at bootstrap, it has no static types to check against)."""
    name = f"{__name__}.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith(__name__):
            raise ProtosNotGenerated(f"{name} is not generated: {GENERATE_HINT}") from error
        raise
