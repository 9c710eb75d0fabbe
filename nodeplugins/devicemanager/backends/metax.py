"""MetaX GPUs: the card's render node and the control node.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class MetaxBackend(ProfiledBackend):
    manufacturer = "metax"
    visible_env = ("METAX_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = "/dev/dri/renderD{index}"
    control_nodes = ("/dev/mxcd",)
