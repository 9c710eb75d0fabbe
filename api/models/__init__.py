"""Pydantic models of every custom resource the operator serves.

Group ``worker.gpustack.ai`` at ``v1`` (and ``Setting`` in ``gpustack.ai/v1``), one module per kind or
family of kinds. The JSON shape follows the reference implementation's Go API types; each module's
docstring names the Go file it follows and any deliberate difference.

- ``KINDS`` maps ``(apiVersion, kind)`` to the model class; each class carries its CRD identity,
  scope, names and printer columns in ``__crd__``.
- ``parse(document)`` validates a manifest into its model or raises :class:`ManifestError` with
  ``(field_path, message)`` pairs.
- ``dump(model)`` serialises a model back to a manifest as the Go types would.
"""

from api.models.base import CRD, PrinterColumn, Resource, Rule
from api.models.devices import Devices
from api.models.instance import (
    Instance,
    InstanceImagePullSecret,
    InstancePersistentVolume,
    InstanceSSHPublicKey,
)
from api.models.instance_type import InstanceType, InstanceTypeFlavor
from api.models.kv_cache_backend import KVCacheBackend
from api.models.kv_cache_pool import KVCachePool, KVCachePoolBinding
from api.models.model_artifact import ModelArtifact
from api.models.model_deployment import ModelDeployment
from api.models.model_store import ModelPrefetch, ModelStore, ModelStoreBinding, NodeModelStore
from api.models.registry import KINDS, RESOURCES, ManifestError, dump, parse
from api.models.setting import Setting
from api.models.topology import TopologySource

__all__ = [
    "CRD",
    "KINDS",
    "RESOURCES",
    "Devices",
    "Instance",
    "InstanceImagePullSecret",
    "InstancePersistentVolume",
    "InstanceSSHPublicKey",
    "InstanceType",
    "InstanceTypeFlavor",
    "KVCacheBackend",
    "KVCachePool",
    "KVCachePoolBinding",
    "ManifestError",
    "ModelArtifact",
    "ModelDeployment",
    "ModelPrefetch",
    "ModelStore",
    "ModelStoreBinding",
    "NodeModelStore",
    "PrinterColumn",
    "Resource",
    "Rule",
    "Setting",
    "TopologySource",
    "dump",
    "parse",
]
