"""Iluvatar GPUs: ``IX_VISIBLE_DEVICES``; ``ix-container-runtime`` injects corex and the nodes.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class IluvatarBackend(ProfiledBackend):
    manufacturer = "iluvatar"
    visible_env = ("IX_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = ""
    control_nodes = ()
