"""Cambricon MLUs: the card's own node and the control node, plus ``CAMBRICON_VISIBLE_DEVICES``.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class CambriconBackend(ProfiledBackend):
    manufacturer = "cambricon"
    visible_env = ("CAMBRICON_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = "/dev/cambricon_dev{index}"
    control_nodes = ("/dev/cambricon_ctl",)
