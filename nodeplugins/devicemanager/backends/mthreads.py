"""Moore Threads GPUs: ``MTHREADS_VISIBLE_DEVICES``; the mthreads runtime injects the nodes.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class MthreadsBackend(ProfiledBackend):
    manufacturer = "mthreads"
    visible_env = ("MTHREADS_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = ""
    control_nodes = ()
