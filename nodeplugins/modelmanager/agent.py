"""The model-manager node agent: configuration, capacity, collection, restart and status
(model-delivery spec §4.5-§4.7), around the cache, the materializer and the CSI node logic.

- Configuration is the node's own ``NodeModelStore.spec`` and the CA ConfigMap it names, re-checked
  here; an invalid one is ``Ready=False/InvalidConfiguration``: no download starts and nothing is
  collected (published content still mounts).
- Capacity: usage of the whole cache filesystem, watermarks capped by kubelet's thresholds when the
  cache shares kubelet's device.
- Collection runs when usage passes the high watermark, when a reservation does not fit, and every
  five minutes; it is skipped (and says why) when references cannot be read or no valid
  configuration is applied.
- On start, references are rebuilt from the node's mounts (and the ledger keeps only those),
  scratch is cleared, partial directories no attempt ever asked for are removed, and status is
  rewritten from disk and mounts.
- Status is written on change, progress on thresholds (:mod:`.status`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api import constants
from api import delivery as d
from kube.client import ApiError, Client
from kube.informer import Informer
from nodeplugins.modelmanager import collect, metrics, mounts, status
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.capacity import Usage, Watermarks, effective, kubelet_cap, usage_of
from nodeplugins.modelmanager.config import PluginConfig, parse_config
from nodeplugins.modelmanager.download import Limits, Tuning
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.materialize import Materializer
from nodeplugins.modelmanager.peers import Peers
from nodeplugins.modelmanager.publish import MountOps, NodeService
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit

log = logging.getLogger("modelmanager.agent")
COLLECT_EVERY = 300.0
CANCEL_CHECK_EVERY = 30.0
CA_KEY = "ca.crt"


@dataclass(frozen=True)
class AgentOptions:
    node_name: str
    root: Path
    kubelet_dir: Path
    tuning: Tuning = field(default_factory=Tuning)
    tick: float = 1.0
    unreferenced_grace: float = collect.UNREFERENCED_GRACE
    # Peer sync (§4.10): the address this node's peer endpoints answer on ("" is off: no serving
    # advertised and no pulling), the projected token presented to peers, how peers are reached.
    peer_address: str = ""
    peer_token_file: Path | None = None
    peer_tls: bool = True
    peer_ca_file: str = ""
    peer_streams_per_source: int = 4
    # How the cache filesystem's usage is read: statvfs on a node; a simulated disk in tests, whose
    # outcome must not hang on how full the machine running them happens to be.
    disk: Callable[[Path], Usage] = usage_of


class Agent:
    def __init__(self, options: AgentOptions, client: Client, *, ops: MountOps | None = None) -> None:
        self.options = options
        self.client = client
        self.ops = ops or MountOps()
        self.layout = Layout(options.root)
        self.cache = NodeCache(self.layout, grace=options.unreferenced_grace)
        self.limits = Limits(RequestLimit(8), ByteRate(0))
        self.artifacts = Informer(client, "ModelArtifact")
        self.stores = Informer(client, "NodeModelStore")
        self.config_maps = Informer(client, "ConfigMap", namespace=constants.SYSTEM_NAMESPACE)
        self._config: PluginConfig | None = None
        self._config_problem: str | None = "no NodeModelStore spec has been read yet"
        self._watermarks: Watermarks | None = None
        self._notes: list[str] = []
        self._nothing_to_remove = False
        self._collection_note = ""
        self._poked = threading.Event()
        self._stop = threading.Event()
        self._throttle = status.Throttle()
        self._thread: threading.Thread | None = None
        self.peers = (
            Peers(
                self.stores,
                options.node_name,
                options.peer_token_file,
                tls=options.peer_tls,
                ca_file=options.peer_ca_file,
                streams_per_source=options.peer_streams_per_source,
                timeout=options.tuning.stall_timeout,
            )
            if options.peer_address
            else None
        )
        self.materializer = Materializer(
            self.cache,
            self.limits,
            lambda: self._config,
            self,
            tuning=options.tuning,
            on_change=self.poke,
            peers=self.peers,
        )
        self.service = NodeService(
            self.cache,
            self.materializer,
            self.artifacts,
            options.kubelet_dir,
            ops=self.ops,
            on_change=self.poke,
        )
        self.stores.add_handler(
            lambda event, obj, old: self._reload() if obj["metadata"]["name"] == options.node_name else None
        )
        self.config_maps.add_handler(lambda *_: self._reload())

    # --- configuration ------------------------------------------------------------------------------

    def poke(self) -> None:
        self._poked.set()

    def _reload(self) -> None:
        store = self.stores.get(self.options.node_name)
        if store is None:
            self._config, self._config_problem = (
                None,
                f"NodeModelStore {self.options.node_name} does not exist yet",
            )
        else:
            ca_name = ((store.get("spec") or {}).get("hub") or {}).get("caBundleConfigMap") or ""
            ca = None
            if ca_name:
                found = self.config_maps.get(ca_name, constants.SYSTEM_NAMESPACE)
                ca = ((found or {}).get("data") or {}).get(CA_KEY)
            try:
                config = parse_config(store, ca)
            except ValueError as error:
                self._config, self._config_problem = None, str(error)
            else:
                self._config, self._config_problem = config, None
                self.limits.requests.set_limit(config.concurrency)
                self.limits.rate.set_rate(config.bytes_per_second)
        self._watermarks = self._effective()
        self.poke()

    @property
    def config(self) -> PluginConfig | None:
        return self._config

    def _effective(self) -> Watermarks | None:
        config = self._config
        if config is None:
            return None
        pods = self.options.kubelet_dir / "pods"
        try:
            shares = os.stat(self.options.root).st_dev == os.stat(pods).st_dev
        except OSError:
            shares = False
        cap, note = kubelet_cap(
            dict(config.kubelet) if config.kubelet is not None else None, self.usage().total, shares
        )
        return effective(config.high, config.low, cap, note)

    # --- the Capacity protocol the materializer uses -------------------------------------------------------

    def usage(self) -> Usage:
        return self.options.disk(self.options.root)

    def watermarks(self) -> Watermarks | None:
        return self._watermarks

    def collect_for(self, digest: str, need: int) -> None:
        self.collect(need=need)

    # --- collection --------------------------------------------------------------------------------------

    def collect(self, *, need: int = 0) -> collect.Plan | None:
        marks, config = self._watermarks, self._config
        if config is None or marks is None:
            self._collection_note = (
                f"collection skipped: {self._config_problem or 'no configuration applied yet'}"
            )
            return None
        try:
            referenced = set(
                mounts.tree_references(
                    self.ops.table(), self.service.cache_device, self.options.kubelet_dir
                ).values()
            )
        except OSError as error:
            self._collection_note = f"collection skipped: the node's mounts cannot be read ({error.strerror})"
            return None
        referenced |= self.cache.ledger.referenced()
        plan = self.cache.collect(
            usage=self.usage(),
            high=marks.high,
            low=marks.low,
            referenced=referenced,
            pinned=set(config.pinned),
            running=set(self.materializer.running()),
            need=need,
        )
        self._collection_note = ""
        self._nothing_to_remove = plan.nothing_to_remove
        if plan.remove:
            log.info(
                "collected",
                extra={
                    "digests": [h.digest for h in plan.remove],
                    "bytes": sum(h.bytes for h in plan.remove),
                },
            )
            self.poke()
        return plan

    # --- restart ------------------------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild references from the node's mounts, drop what no attempt owns, clear scratch."""
        self.layout.ensure()
        self.layout.clear_scratch()
        proven = mounts.tree_references(self.ops.table(), self.service.cache_device, self.options.kubelet_dir)
        self.cache.replace_references(proven)
        for stray in self.layout.stray_partials():
            self.layout._discard(stray)
        published = set(self.layout.published_digests())
        for digest in self.layout.partial_digests():
            if digest in published or digest not in self.cache.ledger.asked:
                self.layout.remove_partial(digest)
        log.info("recovered", extra={"references": len(proven), "published": len(published)})

    # --- status ---------------------------------------------------------------------------------------------

    def facts(self) -> status.NodeFacts:
        referenced = self.cache.ledger.referenced()
        trees = {}
        for held in self.cache.held(set()):
            if held.kind == "tree":
                trees[held.digest] = status.Tree(
                    held.bytes,
                    held.last_used,
                    held.digest in referenced,
                    self.layout.tree_source(held.digest),
                )
        downloads = {
            digest: status.Download(attempt.total, attempt.received, attempt.source)
            for digest, attempt in self.materializer.running().items()
        }
        stored = sum(t.size for t in trees.values()) + sum(
            self.layout.partial_bytes(dg) for dg in self.layout.partial_digests() if dg not in trees
        )
        notes = [n for n in ((self._watermarks.note if self._watermarks else ""), self._collection_note) if n]
        return status.NodeFacts(
            generation=self._config.generation if self._config else None,
            usage=self.usage(),
            stored=stored,
            trees=trees,
            downloads=downloads,
            failures=dict(self.cache.ledger.failures),
            config_problem=self._config_problem,
            notes=notes,
            nothing_to_remove=self._nothing_to_remove,
            peer_address=self.options.peer_address or None,
        )

    def report(self, *, now: float | None = None) -> bool:
        """Write status when the throttle says so; True when it wrote."""
        if self.stores.get(self.options.node_name) is None:
            return False
        facts = self.facts()
        metrics.STORED_BYTES.set(facts.stored)
        metrics.CAPACITY_BYTES.set(facts.usage.total)
        rendered = status.render(facts)
        when = time.time() if now is None else now
        if not self._throttle.due(rendered, when):
            return False
        previous = ((self.stores.get(self.options.node_name) or {}).get("status") or {}).get("conditions")
        body = status.with_transition_times(rendered, previous, when)
        try:
            self.client.patch(
                "NodeModelStore", self.options.node_name, {"status": body}, subresource="status"
            )
        except ApiError as error:
            log.warning("status not written", extra={"error": f"{error.status} {error.reason}"})
            return False
        self._throttle.written(rendered, when)
        return True

    # --- running -----------------------------------------------------------------------------------------

    def start(self, *, sync_timeout: float = 60.0) -> None:
        for informer in (self.artifacts, self.stores, self.config_maps):
            informer.start()
        for informer in (self.stores, self.config_maps):
            informer.wait_synced(sync_timeout)
        self._reload()
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="model-manager", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.materializer.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for informer in (self.artifacts, self.stores, self.config_maps):
            informer.stop()

    def _loop(self) -> None:
        last_collect = 0.0
        last_cancel = time.monotonic()
        while not self._stop.is_set():
            self._poked.wait(self.options.tick)
            self._poked.clear()
            now = time.monotonic()
            try:
                if now - last_cancel >= CANCEL_CHECK_EVERY:
                    self.materializer.cancel_idle()
                    last_cancel = now
                marks = self._watermarks
                above = marks is not None and self.usage().percent > marks.high
                if above or now - last_collect >= COLLECT_EVERY:
                    self.collect()
                    last_collect = now
                self.report()
                metrics.LAST_PASS.set_to_current_time()
            except Exception as error:  # the loop outlives any one bad pass
                log.warning("maintenance pass failed", extra={"error": f"{type(error).__name__}: {error}"})

    def downloads(self) -> list[dict[str, Any]]:
        """What ``GET /model/downloads`` answers: node-local progress by digest, no tenant."""
        return [
            {
                "digest": digest,
                "sizeBytes": a.total,
                "downloadedBytes": a.received,
                "state": d.STATE_DOWNLOADING,
            }
            for digest, a in sorted(self.materializer.running().items())
        ]
