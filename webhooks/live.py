"""Lookups against the apiserver: watch-backed caches where staleness is harmless, direct reads
where the spec says a stale cache must not decide.

InstanceTypes (indexed by queue entrance) and Settings are cached.  A cache miss, a kind without a
cache, or a caller asking ``fresh=True`` goes to the apiserver on a worker thread with a deadline
shorter than the webhooks' ``timeoutSeconds``, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from api import constants
from api.objects import Obj
from kube.client import ApiError, Client, load_api_client
from kube.informer import Informer
from webhooks.lookups import LookupFailed, Lookups

DEADLINE = 6.0  # seconds; webhooks time out at 10


def _entrance(obj: Obj) -> list[str]:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(constants.LABEL_QUEUE_ENTRANCE)
    return [value] if value else []


class LiveLookups(Lookups):
    def __init__(self, kubeconfig: str | None = None, *, client: Client | None = None) -> None:
        self.client = client or Client(load_api_client(kubeconfig, component="worker"), timeout=DEADLINE)
        self.informers: dict[str, Informer] = {
            "InstanceType": Informer(self.client, "InstanceType", indexes={"entrance": _entrance}),
            "Setting": Informer(self.client, "Setting", namespace=constants.SYSTEM_NAMESPACE),
        }

    async def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    async def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def synced(self) -> bool:
        return all(informer.synced() for informer in self.informers.values())

    async def _direct(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.wait_for(asyncio.to_thread(call, *args, **kwargs), DEADLINE)
        except TimeoutError:
            raise LookupFailed(f"the apiserver did not answer within {DEADLINE:g}s") from None
        except ApiError as error:
            raise LookupFailed(f"reading from the apiserver failed: {error}") from None

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> Obj | None:
        informer = self.informers.get(kind)
        if informer is not None and not fresh and informer.synced():
            hit = informer.get(name, namespace)
            if hit is not None:
                return hit
        return await self._direct(self.client.get, kind, name, namespace)

    async def list(self, kind: str, namespace: str = "") -> list[Obj]:
        informer = self.informers.get(kind)
        if informer is not None and informer.synced():
            items = informer.list()
            if namespace:
                items = [i for i in items if (i.get("metadata") or {}).get("namespace") == namespace]
            return items
        items, _ = await self._direct(self.client.list, kind, namespace)
        return items

    async def instance_type_by_entrance(self, queue_name: str) -> Obj | None:
        informer = self.informers["InstanceType"]
        if informer.synced():
            hits = informer.by_index("entrance", queue_name)
            if hits:
                return hits[0]
        # Cold cache, or created a moment ago: one uncached read decides.
        items, _ = await self._direct(
            self.client.list, "InstanceType", label_selector=f"{constants.LABEL_QUEUE_ENTRANCE}={queue_name}"
        )
        return items[0] if items else None
