"""``SettingStatusReconciler``: each Setting's ``status`` — the value readers use, its description
and flags — so ``kubectl get settings`` shows the VALUE column (operations spec D.8).

Readers read ``spec.value`` (webhooks through their watch cache, controllers per reconcile); the
status is an echo for people, written only when it differs from what the spec implies.
"""

from __future__ import annotations

from collections.abc import Hashable

from api import SETTINGS_API_VERSION, constants
from api import settings as registry
from controllers.install import plan
from kube import changes
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-worker-settings"


class SettingStatusReconciler(Controller):
    name = "setting-status"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.settings = self.informer("Setting", constants.SYSTEM_NAMESPACE)

    def watches(self) -> list[Watch]:
        def setting(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if event == "DELETED":
                return []
            return [changes.path(obj, "metadata", "name")]

        return [Watch("Setting", setting, namespace=constants.SYSTEM_NAMESPACE)]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        obj = self.settings.get(name, constants.SYSTEM_NAMESPACE)
        if obj is None or name not in registry.SETTINGS:
            return None
        value = changes.path(obj, "spec", "value")
        want = plan.setting_status(name, value if isinstance(value, str) else None)
        if (obj.get("status") or {}) == want:
            return None
        self.client.apply(
            {
                "apiVersion": SETTINGS_API_VERSION,
                "kind": "Setting",
                "metadata": {"name": name, "namespace": constants.SYSTEM_NAMESPACE},
                "status": want,
            },
            field_manager=FIELD_MANAGER,
            subresource="status",
        )
        return None
