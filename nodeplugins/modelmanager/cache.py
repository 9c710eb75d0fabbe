"""The node's cache: layout, ledger and the collection lock, and the operations that must happen
under it (spec §4.5, §4.6, §7 item 6).

A mount records its reference under the collection lock and persists it **before** it binds, so a
tree is never removed between the check that it is published and the bind. Collection removes only
under the same lock, reading references from the node's mounts (the caller passes them), never
from the API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Set
from dataclasses import asdict

from nodeplugins.modelmanager import collect, metrics
from nodeplugins.modelmanager.capacity import Usage
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.ledger import Failure, Ledger, backoff

ASK_PERSIST_EVERY = 60.0


class NodeCache:
    def __init__(
        self,
        layout: Layout,
        clock: Callable[[], float] = time.time,
        *,
        grace: float = collect.UNREFERENCED_GRACE,
    ) -> None:
        self.layout = layout
        self.grace = grace  # how long an unreferenced tree is kept (tests shorten it)
        self.clock = clock
        self.lock = threading.RLock()  # the collection lock
        layout.ensure()
        self.ledger = Ledger.load(layout.ledger)

    def _save(self) -> None:
        self.ledger.save(self.layout.ledger)

    # --- references ----------------------------------------------------------------------------------

    def add_reference(self, target: str, digest: str) -> None:
        """Record (and persist) that ``target`` mounts ``digest``; call with :attr:`lock` held."""
        self.ledger.record("ref", t=target, d=digest, at=self.clock())

    def drop_reference(self, target: str) -> str | None:
        with self.lock:
            digest = self.ledger.references.get(target)
            if digest is not None:
                self.ledger.record("unref", t=target, at=self.clock())
            return digest

    def mark_used(self, digest: str) -> None:
        """A publication counts as a use: a tree no mount ever referenced still ages from it."""
        with self.lock:
            self.ledger.record("used", d=digest, at=self.clock())

    def replace_references(self, references: dict[str, str]) -> None:
        """After a restart: the references the node's mounts prove, and nothing else."""
        with self.lock:
            self.ledger.references = dict(references)
            self._save()

    # --- asks and failures -------------------------------------------------------------------------------

    def note_asked(self, digest: str) -> None:
        with self.lock:
            now = self.clock()
            if now - self.ledger.asked.get(digest, 0.0) >= ASK_PERSIST_EVERY:
                self.ledger.record("asked", d=digest, at=now)
            else:
                self.ledger.asked[digest] = now

    def record_failure(self, digest: str, reason: str, message: str, *, back_off: bool) -> Failure:
        with self.lock:
            now = self.clock()
            previous = self.ledger.failures.get(digest)
            count = (previous.count if previous else 0) + (1 if back_off else 0)
            retry_at = now + backoff(count) if back_off else None
            failure = Failure(reason, message, retry_at, count, now)
            self.ledger.record("fail", d=digest, f=asdict(failure))
            return failure

    def clear_failure(self, digest: str) -> None:
        with self.lock:
            if digest in self.ledger.failures:
                self.ledger.record("unfail", d=digest)

    def blocked(self, digest: str) -> Failure | None:
        """The failure whose retry time has not come yet, or None."""
        failure = self.ledger.failures.get(digest)
        if failure is not None and failure.retry_at is not None and failure.retry_at > self.clock():
            return failure
        return None

    # --- collection ------------------------------------------------------------------------------------

    def held(self, running: Set[str]) -> list[collect.Held]:
        out = []
        for digest in self.layout.published_digests():
            manifest = self.layout.tree_manifest(digest)
            size = manifest.size if manifest else 0
            last = self.ledger.last_used.get(digest) or self.layout.marker_time(digest)
            out.append(collect.Held(digest, "tree", size, last))
        published = {h.digest for h in out}
        for digest in self.layout.partial_digests():
            if digest in published:
                continue
            last = self.ledger.asked.get(digest, 0.0)
            out.append(collect.Held(digest, "partial", self.layout.partial_bytes(digest), last))
        return out

    def collect(
        self,
        *,
        usage: Usage,
        high: int,
        low: int,
        referenced: Set[str],
        pinned: Set[str],
        running: Set[str],
        need: int = 0,
    ) -> collect.Plan:
        """Plan and carry out one collection under the lock; returns the plan."""
        with self.lock:
            facts = collect.Facts(
                held=tuple(self.held(running)),
                referenced=referenced,
                pinned=pinned,
                running=running,
                failures={d: f.last for d, f in self.ledger.failures.items()},
                used=usage.used,
                total=usage.total,
            )
            result = collect.plan(facts, now=self.clock(), high=high, low=low, need=need, grace=self.grace)
            for item in result.remove:
                if item.kind == "tree":
                    self.layout.remove_tree(item.digest)
                else:
                    self.layout.remove_partial(item.digest)
                metrics.GC_REMOVED_BYTES.inc(item.bytes)
                self.ledger.last_used.pop(item.digest, None)
                self.ledger.asked.pop(item.digest, None)
            for digest in result.forget_failures:
                self.ledger.failures.pop(digest, None)
            if result.remove or result.forget_failures:
                self._save()
            return result
