"""AMD GPUs: ``/dev/kfd`` plus each card's render node; ``ROCR_VISIBLE_DEVICES`` names the cards and ``AMD_VISIBLE_DEVICES=none`` keeps any AMD runtime from adding more.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeplugins.devicemanager.backends.base import Grant, Injection
from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class AmdBackend(ProfiledBackend):
    manufacturer = "amd"
    visible_env = ("ROCR_VISIBLE_DEVICES",)
    visible_by_uuid = True
    device_node = "/dev/dri/renderD{index}"
    control_nodes = ("/dev/kfd",)

    def inject(
        self, family: str, grants: Sequence[Grant], container_env: Mapping[str, str] | None = None
    ) -> Injection:
        injection = super().inject(family, grants, container_env)
        injection.envs["AMD_VISIBLE_DEVICES"] = "none"
        return injection
