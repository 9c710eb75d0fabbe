"""The ``InstanceTypeFlavor`` catalog (``controllers.pools.catalog``, §2.3): kept equal to what the
live generated ResourceFlavors call for.

One key for the whole cluster: a flavor change, or an entry edited or deleted by hand, costs one pass
that applies the entries whose spec differs and deletes those no flavor calls for.  The grouping
setting ``instance-type-aware-cpu-manufacturer`` is read per pass (a flip wakes nothing by itself,
§10; the next flavor change or resync regroups the catalog).
"""

from __future__ import annotations

from collections.abc import Hashable

from api import constants
from controllers.pools import catalog, render
from controllers.settings import AWARE_CPU, SettingsReader
from kube import changes
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-operator/instance-type-flavors"
KEY = "catalog"


class InstanceTypeFlavorReconciler(Controller):
    name = "instance-type-flavors"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.flavors = self.informer("ResourceFlavor")
        self.entries = self.informer("InstanceTypeFlavor")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))

    def watches(self) -> list[Watch]:
        def flavor(event: str, obj: dict, old: dict | None) -> list[str]:
            if not render.owned_flavor(obj) and not render.owned_flavor(old or {}):
                return []
            moved = changes.moved(
                event,
                obj,
                old,
                ("metadata", "labels"),
                ("metadata", "annotations"),
                ("metadata", "deletionTimestamp"),
            )
            return [KEY] if moved else []

        def entry(event: str, obj: dict, old: dict | None) -> list[str]:
            return (
                [KEY] if changes.moved(event, obj, old, ("spec",), ("metadata", "deletionTimestamp")) else []
            )

        return [Watch("ResourceFlavor", flavor), Watch("InstanceTypeFlavor", entry)]

    def reconcile(self, key: Hashable) -> float | None:
        wanted = catalog.catalog(self.flavors.list(), aware_cpu=self.settings.enabled(AWARE_CPU))
        apply, delete = catalog.plan(wanted, self.entries.list())
        for body in apply:
            self.client.apply(body, field_manager=FIELD_MANAGER)
        for name in delete:
            self.client.delete("InstanceTypeFlavor", name)
        return None
