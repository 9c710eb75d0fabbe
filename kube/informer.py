"""Informer: a watch-fed cache of one kind, with indexes and event handlers.

It lists, then watches from the list's resourceVersion; a ``410 Gone`` (or any broken watch)
re-lists; every ``resync`` seconds handlers see every object again.  It runs on its own daemon
thread (the official client is synchronous); readers on the event loop only read dicts, which the
thread replaces whole, never mutates in place.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable

from api.objects import Obj
from kube.client import ApiError, Client

log = logging.getLogger("controllers.informer")

Key = tuple[str, str]  # (namespace, name)
Handler = Callable[[str, Obj, Obj | None], None]  # (event type, object, old object)
IndexFunc = Callable[[Obj], list[str]]


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Informer:
    def __init__(
        self,
        client: Client,
        kind: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        resync: float = 3600.0,
        indexes: dict[str, IndexFunc] | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.resync = resync
        self._items: dict[Key, Obj] = {}
        self._named: dict[str, Obj] = {}  # the objects without a namespace, by name
        self._index_funcs = indexes or {}
        self._indexes: dict[str, dict[str, set[Key]]] = {name: {} for name in self._index_funcs}
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # Reading ------------------------------------------------------------------------------------

    def get(self, name: str, namespace: str = "") -> Obj | None:
        return self._items.get((namespace, name))

    def list(self) -> list[Obj]:
        return list(self._items.values())

    def by_name(self) -> dict[str, Obj]:
        """The cached objects of a cluster-scoped kind (Nodes, ``Devices``, ResourceFlavors) by
        name: a copy, made in one C call under the GIL.  For 1,250 Nodes that is 5.5 µs, against
        70 µs for a dict built from :meth:`list` by subscripts and 620 µs through
        ``changes.name_of``, which callers did once per decision.  Objects with a namespace are not
        in it."""
        return dict(self._named)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        keys = self._indexes[index].get(value, ())
        items = self._items
        return [items[k] for k in list(keys) if k in items]

    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    # Writing (the informer thread only) ---------------------------------------------------------

    def _index(self, key: Key, obj: Obj | None, old: Obj | None) -> None:
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            if old is not None:
                for value in func(old):
                    members = index.get(value)
                    if members is not None:
                        members.discard(key)
                        if not members:
                            del index[value]
            if obj is not None:
                for value in func(obj):
                    index.setdefault(value, set()).add(key)

    def _put(self, key: Key, obj: Obj, old: Obj | None) -> None:
        """Cache ``obj`` in place of ``old``, no handler told (the caller holds the lock, or owns
        the informer: a test seeding a cache)."""
        self._items[key] = obj
        if not key[0]:
            self._named[key[1]] = obj
        self._index(key, obj, old)

    def _store(self, event: str, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._items.get(key)
            if event == "DELETED":
                self._items.pop(key, None)
                if not key[0]:
                    self._named.pop(key[1], None)
                self._index(key, None, old)
            else:
                self._put(key, obj, old)
        self._notify(event, obj, old)

    def _notify(self, event: str, obj: Obj, old: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(event, obj, old)
            except Exception:
                log.exception("informer handler failed", extra={"kind": self.kind})

    def _relist(self) -> str:
        items, version = self.client.list(self.kind, self.namespace, label_selector=self.label_selector)
        fresh = {key_of(item): item for item in items}
        with self._lock:
            gone = [self._items[k] for k in self._items.keys() - fresh.keys()]
            previous = self._items
            self._items = fresh
            self._named = {name: item for (namespace, name), item in fresh.items() if not namespace}
            self._indexes = {name: {} for name in self._index_funcs}
            for key, item in fresh.items():
                self._index(key, item, None)
        for obj in gone:
            self._notify("DELETED", obj, obj)
        for key, item in fresh.items():
            old = previous.get(key)
            if old is None or (old.get("metadata") or {}).get("resourceVersion") != (
                item.get("metadata") or {}
            ).get("resourceVersion"):
                self._notify("ADDED" if old is None else "MODIFIED", item, old)
        self._synced.set()
        return version

    def _run(self) -> None:
        version = ""
        last_resync = time.monotonic()
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                if not version:
                    version = self._relist()
                    backoff = 0.5
                for event in self.client.watch(
                    self.kind,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=240,
                    label_selector=self.label_selector,
                ):
                    if self._stopping.is_set():
                        return
                    kind, obj = str(event.get("type") or ""), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            version = ""  # too old: re-list
                            break
                        raise ApiError(
                            int(obj.get("code") or 0), obj.get("reason", ""), obj.get("message", "")
                        )
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    obj.setdefault("kind", self.kind)
                    self._store(kind, obj)
                if time.monotonic() - last_resync >= self.resync:
                    last_resync = time.monotonic()
                    for item in self.list():
                        self._notify("MODIFIED", item, item)
            except ApiError as error:
                if error.gone:
                    version = ""
                    continue
                log.warning("watch failed; retrying", extra={"kind": self.kind, "error": str(error)})
                version = ""
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as error:
                log.warning("watch broke; re-listing", extra={"kind": self.kind, "error": str(error)})
                version = ""
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
