"""``Setting`` (``gpustack.ai/v1``): one online-adjustable operator setting, in the system namespace.

Follows ``api/v1/setting.go``: ``spec.value`` is the write-only input (a pointer: an explicit empty
string clears a setting), ``status`` echoes the current value with its description and flags. The
registry of setting names, defaults and validators is ``api.settings``.
"""

from __future__ import annotations

from typing import ClassVar

from api import SETTINGS_GROUP
from api.models.base import AGE, CRD, PrinterColumn, Resource, Schema, field


class SettingSpec(Schema):
    value: str | None = field(pointer=True, doc="The new value; validated per setting.")


class SettingStatus(Schema):
    description: str | None = None
    editable: bool = field(required=True, always=True)
    sensitive: bool = field(required=True, always=True)
    value: str = field(required=True, always=True, doc='The current value; "(sensitive)" when sensitive.')


class Setting(Resource):
    """One operator setting; the name is the setting's, e.g. model-store-high-watermark."""

    __crd__: ClassVar[CRD] = CRD(
        kind="Setting",
        plural="settings",
        scope="Namespaced",
        short_names=("set",),
        group=SETTINGS_GROUP,
        columns=(PrinterColumn("Value", ".status.value"), AGE),
    )

    spec: SettingSpec | None = None
    status: SettingStatus | None = None
