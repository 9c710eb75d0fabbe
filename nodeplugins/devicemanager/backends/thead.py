"""T-Head PPUs: the card's node plus the two shared control nodes; no visible-devices env.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class TheadBackend(ProfiledBackend):
    manufacturer = "thead"
    visible_env = ()
    visible_by_uuid = False
    device_node = "/dev/alixpu_ppu{index}"
    control_nodes = ("/dev/alixpu", "/dev/alixpu_ctl")
