"""The ModelDeployment webhooks (model-deployment spec §5, §11.4): one package, one module per concern.

- :mod:`.handlers` — the defaulting and validating entry points the registry serves;
- :mod:`.view` — a tolerant read of the object (roles, engine, ports) that every rule shares;
- :mod:`.rules` — the field rules of §5 in the spec's order; :mod:`.owned` — owned engine keys;
- :mod:`.serving` — ports, served names and weight mounts; :mod:`.identity` — frozen identity;
- :mod:`.lookups` — the InstanceType and runner-image rules that read the cluster.
"""

from webhooks.modeldeployment.handlers import default, validate

__all__ = ["default", "validate"]
