"""Absence ensurers (operations spec D.5, D.9 (3)): while the worker runs, a CRD or webhook
configuration of ours that disappears is created again — and one that exists is never touched.

Every replica runs them, leader or not.  They only ever *create*: realigning a spec that exists
would make an old and a new version fight during a roll (each "fixing" the other's CRD), and a
created-twice object is a 409 for the slower replica, which is fine.  They watch the objects
labelled ``app.kubernetes.io/part-of: gpustack-operator`` of the three kinds; an object that loses
that label looks deleted to the watch and is answered with a create that conflicts, i.e. nothing.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

from api import constants
from api.objects import Obj
from kube.client import ApiError, Client
from kube.informer import Informer

log = logging.getLogger("controllers.install.ensurers")

KINDS = ("CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
SELECTOR = f"{constants.LABEL_PART_OF}=gpustack-operator"
Key = tuple[str, str]


class AbsenceEnsurer:
    """``desired()`` gives the objects to keep present, by (kind, name), rendered afresh each time
    (the webhook configurations carry the current CA)."""

    def __init__(self, client: Client, desired: Callable[[], dict[Key, Obj]]) -> None:
        self.client = client
        self.desired = desired
        self.recreated: list[Key] = []
        self.informers = {
            kind: Informer(client, kind, label_selector=SELECTOR, resync=600.0) for kind in KINDS
        }
        for kind, informer in self.informers.items():
            informer.add_handler(self._handler(kind))

    def _handler(self, kind: str) -> Callable[[str, Obj, Obj | None], None]:
        def handle(event: str, obj: Obj, old: Obj | None) -> None:
            if event == "DELETED":
                self.ensure(kind, (obj.get("metadata") or {}).get("name", ""))

        return handle

    def ensure(self, kind: str, name: str) -> bool:
        """Create (kind, name) when it is one of ours and absent; True when this call created it."""
        want = self.desired().get((kind, name))
        if want is None:
            return False
        body = copy.deepcopy(want)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            body.get("metadata", {}).pop(key, None)
        try:
            self.client.create(body)
        except ApiError as error:
            if error.conflict:  # it exists (a peer recreated it, or it never went): leave it be
                return False
            log.warning("could not recreate", extra={"kind": kind, "object": name, "error": str(error)})
            return False
        self.recreated.append((kind, name))
        log.warning("recreated a deleted object", extra={"kind": kind, "object": name})
        return True

    def sweep(self) -> list[Key]:
        """Create every desired object the caches do not hold (once they are synced)."""
        created = []
        for kind, name in self.desired():
            informer = self.informers[kind]
            if informer.synced() and informer.get(name) is None and self.ensure(kind, name):
                created.append((kind, name))
        return created

    def synced(self) -> bool:
        return all(i.synced() for i in self.informers.values())

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()
