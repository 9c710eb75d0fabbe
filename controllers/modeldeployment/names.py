"""The names a ModelDeployment's objects take (model-deployment.md §7.1, §7.6).

size 1: Pods are created with ``generateName: <md>-<role>-`` so a departed replica's name is never
reused.  size > 1: members are named ``<md>-<role>-r<ordinal>-m<member>`` with ``hostname`` = name
and ``subdomain`` = the instance's headless Service ``<md>-<role>-r<ordinal>``; member ``m0`` leads.

Services: ``<md>`` (deployment), ``<md>-<role>`` (role), ``<md>-<role>-r<k>`` (instance, size > 1),
``<md>-router`` (router).  The webhook refuses names that collide or overflow (§5 #6–#8), so these
functions only spell them.

The Kueue pod-group name is ``gpustack-fnv64-<hash>`` over (namespace, deployment, role, ordinal)
joined by NUL bytes: always hashed, never parsed back (§7.2); the ordinal travels in its own label.
"""

from __future__ import annotations

from api.naming import fnv1a64

GROUP_PREFIX = "gpustack-fnv64-"


def generate_name(md: str, role: str) -> str:
    """``<md>-<role>-``: the prefix of a size-1 replica's generated name."""
    return f"{md}-{role}-"


def member_name(md: str, role: str, ordinal: int, member: int) -> str:
    """``<md>-<role>-r<ordinal>-m<member>``: a member of a replica above size 1."""
    return f"{md}-{role}-r{ordinal}-m{member}"


def instance_service(md: str, role: str, ordinal: int) -> str:
    """``<md>-<role>-r<ordinal>``: the headless Service (and subdomain) of one replica above size 1."""
    return f"{md}-{role}-r{ordinal}"


def role_service(md: str, role: str) -> str:
    return f"{md}-{role}"


def deployment_service(md: str) -> str:
    return md


def router_name(md: str) -> str:
    """``<md>-router``: the router's Service, Deployment, ConfigMap and RBAC objects."""
    return f"{md}-router"


def leader_address(md: str, role: str, ordinal: int) -> str:
    """``<md>-<role>-r<k>-m0.<md>-<role>-r<k>``: member 0 of a replica, through its headless Service."""
    return f"{member_name(md, role, ordinal, 0)}.{instance_service(md, role, ordinal)}"


def pod_group_name(namespace: str, md: str, role: str, ordinal: int) -> str:
    """The Kueue pod group of one replica: ``gpustack-fnv64-<FNV-1a 64>``."""
    raw = b"\x00".join(part.encode() for part in (namespace, md, role, str(ordinal)))
    return GROUP_PREFIX + fnv1a64(raw)
