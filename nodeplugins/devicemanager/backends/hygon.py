"""Hygon DCUs: ``/dev/kfd`` and the card's render node, plus ``HIP_VISIBLE_DEVICES``.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class HygonBackend(ProfiledBackend):
    manufacturer = "hygon"
    visible_env = ("HIP_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = "/dev/dri/renderD{index}"
    control_nodes = ("/dev/kfd",)
