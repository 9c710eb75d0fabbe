"""``roles[].topology.requiredLevel`` on a ModelDeployment's Pods (topology spec B.5).

The level is a label key (``topology.kubernetes.io/zone``), never a domain value; admission has
checked its syntax and refused the implicit hostname.  It becomes the annotation
``kueue.x-k8s.io/podset-required-topology`` on every Pod of each replica group: the annotations
are part of the role template, so of the role's render hash, and changing or removing the level
replaces only that role's groups.  Without it the Pods carry no request and Kueue picks any domain
of the queue's topology-aware flavors.  Availability of the level is Kueue's to resolve.
"""

from __future__ import annotations

from api import constants
from readmodels.modeldeployment import Deployment, Role


class RequiredLevel:
    """The ModelDeployment renderer's topology feature (``extensions.TopologyFeature``)."""

    kinds: tuple[str, ...] = ()  # reads nothing beyond the deployment itself

    def annotations(self, md: Deployment, role: Role) -> dict[str, str]:
        topology = role.raw.get("topology")
        level = topology.get("requiredLevel") if isinstance(topology, dict) else None
        if isinstance(level, str) and level.strip():
            return {constants.KUEUE_PODSET_REQUIRED_TOPOLOGY: level.strip()}
        return {}
