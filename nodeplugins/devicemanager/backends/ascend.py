"""Huawei Ascend NPUs: ``ASCEND_VISIBLE_DEVICES`` names the driver's ids; the Ascend runtime mounts ``/dev/davinci<N>``.

Discovery reads a simulated profile (``--simulate``); a real binding may follow.
"""

from __future__ import annotations

from nodeplugins.devicemanager.backends.profiled import ProfiledBackend


class AscendBackend(ProfiledBackend):
    manufacturer = "ascend"
    visible_env = ("ASCEND_VISIBLE_DEVICES",)
    visible_by_uuid = False
    device_node = ""
    control_nodes = ()
