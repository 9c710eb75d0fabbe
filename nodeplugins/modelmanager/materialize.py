"""Materialization attempts: one background attempt per digest per node, joined by concurrent mounts
(model-delivery spec §4.5).

An attempt lists the tree at the pinned commit with the mount's credential, applies the artifact's
patterns and checks the digest; reserves the rest of the manifest against the high watermark
(collecting first when it does not fit); downloads every file under the node-wide limits, verified
while streaming and resumable; and publishes atomically. A failure records the digest ``Failed``
with its reason and a retry time (back-off: 1 min doubling to 1 h; none for ``InvalidRequest`` and
``Canceled``). An attempt no mount asked for in five minutes is canceled; its partial files stay.

Nothing here logs or records a token, a repository or an artifact: log lines name the digest.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from api import delivery as d
from api.manifest import Manifest
from modelhub import huggingface as hf
from modelhub.errors import HubError
from nodeplugins.modelmanager import metrics
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.capacity import Reservations, Usage, Watermarks
from nodeplugins.modelmanager.config import PluginConfig
from nodeplugins.modelmanager.download import FileDownload, Limits, Tuning
from nodeplugins.modelmanager.fetch import FetchError, Source
from nodeplugins.modelmanager.ledger import Failure
from nodeplugins.modelmanager.peers import Peer, Peers
from nodeplugins.modelmanager.throttle import RequestLimit

log = logging.getLogger("modelmanager.materialize")

CANCEL_AFTER = 300.0
NO_BACKOFF = (d.INVALID_REQUEST, d.CANCELED)
# Failures that belong to one source (the next may succeed); a full disk or a cancel ends the attempt.
SOURCE_FAULTS = (d.SOURCE_UNAVAILABLE, d.INTEGRITY_MISMATCH, d.ACCESS_DENIED)


@dataclass(frozen=True)
class Request:
    """What a mount asks to have on the node. The token is the mount's, for this attempt only."""

    digest: str
    repository: str
    commit: str
    allow: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False, compare=False)
    anchored: bool = False  # digestSource Expected: no commit to list; peers are the only source


class Capacity(Protocol):
    def usage(self) -> Usage: ...
    def watermarks(self) -> Watermarks | None: ...
    def collect_for(self, digest: str, need: int) -> None: ...


@dataclass(frozen=True)
class Published:
    pass


@dataclass(frozen=True)
class Blocked:
    failure: Failure


@dataclass(frozen=True)
class InProgress:
    digest: str
    received: int
    total: int | None

    def describe(self) -> str:
        if self.total is None:
            return f"materializing {self.digest}: listing its files"
        return f"materializing {self.digest}: {_size(self.received)} of {_size(self.total)} received"


Outcome = Published | Blocked | InProgress


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class Attempt:
    def __init__(self, request: Request, now: float) -> None:
        self.request = request
        self.asked = now
        self.started = now
        self.received = 0
        self.total: int | None = None
        self.source = d.SOURCE_HUB  # where the bytes come from now
        self.by_source: dict[str, int] = {}
        self.cancel = threading.Event()  # idle: no mount asked for five minutes
        self.abort = threading.Event()  # another file failed: stop the rest
        self._lock = threading.Lock()

    def add(self, n: int, source: str = d.SOURCE_HUB) -> None:
        with self._lock:
            self.received += n
            self.by_source[source] = self.by_source.get(source, 0) + n
        metrics.DOWNLOAD_BYTES.labels(source.lower()).inc(n)

    def majority(self) -> str:
        """``Peer`` when peers delivered more of this attempt's bytes than the hub, else ``Hub``."""
        peer = self.by_source.get(d.SOURCE_PEER, 0)
        return d.SOURCE_PEER if peer > self.by_source.get(d.SOURCE_HUB, 0) else d.SOURCE_HUB

    def remaining(self) -> int:
        return 0 if self.total is None else max(self.total - self.received, 0)

    def stopping(self) -> bool:
        return self.cancel.is_set() or self.abort.is_set()

    def progress(self) -> InProgress:
        return InProgress(self.request.digest, self.received, self.total)


class Materializer:
    def __init__(
        self,
        cache: NodeCache,
        limits: Limits,
        config: Callable[[], PluginConfig | None],
        capacity: Capacity,
        *,
        tuning: Tuning | None = None,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        peers: Peers | None = None,
    ) -> None:
        self.peers = peers
        self.cache = cache
        self.limits = limits
        self.config = config
        self.capacity = capacity
        self.tuning = tuning or Tuning()
        self.on_change = on_change
        self.clock = clock
        self.reservations = Reservations()
        self._lock = threading.Lock()
        self._running: dict[str, Attempt] = {}
        self._threads: dict[str, threading.Thread] = {}

    # --- what mounts call --------------------------------------------------------------------------------

    def ensure(self, request: Request) -> Outcome:
        """Published, blocked by a back-off, or in progress (started or joined now)."""
        digest = request.digest
        with self._lock:
            if self.cache.layout.published(digest):
                return Published()
            attempt = self._running.get(digest)
            if attempt is not None:
                attempt.asked = self.clock()
                self.cache.note_asked(digest)
                return attempt.progress()
            failure = self.cache.blocked(digest)
            if failure is not None:
                return Blocked(failure)
            attempt = Attempt(request, self.clock())
            self._running[digest] = attempt
            self.cache.note_asked(digest)
            thread = threading.Thread(target=self._run, args=(attempt,), name="materialize", daemon=True)
            self._threads[digest] = thread
        log.info("materialization started", extra={"digest": digest})
        thread.start()
        self.on_change()
        return attempt.progress()

    def running(self) -> dict[str, Attempt]:
        with self._lock:
            return dict(self._running)

    def cancel_idle(self) -> list[str]:
        """Cancel attempts no mount asked for in five minutes; returns their digests."""
        now = self.clock()
        canceled = []
        with self._lock:
            for digest, attempt in self._running.items():
                if now - attempt.asked >= CANCEL_AFTER and not attempt.cancel.is_set():
                    attempt.cancel.set()
                    canceled.append(digest)
        return canceled

    def wait(self, digest: str, timeout: float | None = None) -> None:
        """Wait for the digest's attempt to end (tests and shutdown)."""
        thread = self._threads.get(digest)
        if thread is not None:
            thread.join(timeout)

    def stop(self) -> None:
        with self._lock:
            attempts = list(self._running.values())
            threads = list(self._threads.values())
        for attempt in attempts:
            attempt.cancel.set()
        for thread in threads:
            thread.join(timeout=30)

    # --- the attempt ---------------------------------------------------------------------------------------

    def _run(self, attempt: Attempt) -> None:
        digest = attempt.request.digest
        try:
            config = self.config()
            if config is None:
                raise FetchError(d.INVALID_REQUEST, "the node's configuration is missing or invalid")
            manifest, peers, token = self._listing(config, attempt.request)
            attempt.total = manifest.size
            self.cache.layout.begin(digest, manifest)
            resumed = self._jobs(config, attempt, manifest, None, None)
            attempt.received = sum(job.verified() for job in resumed)
            self.on_change()
            self._reserve(attempt)
            chain: list[Peer | None] = [*peers] + ([] if attempt.request.anchored else [None])
            self._download_chain(attempt, manifest, chain, config, token)
            with self.cache.lock:
                self.cache.layout.publish(digest, manifest, source=attempt.majority())
                self.cache.mark_used(digest)
            self.cache.clear_failure(digest)
            metrics.MATERIALIZATIONS.labels("published").inc()
            metrics.PUBLISH_SECONDS.observe(max(self.clock() - attempt.started, 0.0))
            log.info(
                "materialization published",
                extra={"digest": digest, "bytes": manifest.size, "source": attempt.majority()},
            )
        except FetchError as error:
            self._fail(attempt, error.reason, error.message, error.detail)
        except Exception as error:  # a local fault: reported, never a crash of the plugin
            self._fail(
                attempt, d.SOURCE_UNAVAILABLE, "the node could not store the model", type(error).__name__
            )
        finally:
            self.reservations.release(digest)
            with self._lock:
                self._running.pop(digest, None)
                self._threads.pop(digest, None)
                idle = not self._running
            if idle:
                self.limits.pieces.clear()  # no download runs: the piece buffers go back
            self.on_change()

    def _listing(self, config: PluginConfig, request: Request) -> tuple[Manifest, list[Peer], str | None]:
        """The manifest, from the first peer whose listing binds to the digest (peer sync on), else
        from the hub; and the peers left to pull from, in order."""
        peers: list[Peer] = []
        token = None
        source = self.peers
        if source is not None and config.peer_sync:
            peers = source.candidates(request.digest)
            token = source.token() if peers else None
        while peers and source is not None:
            try:
                return source.manifest(peers[0], request.digest, token), peers, token
            except FetchError as error:
                log.info(
                    "peer listing refused",
                    extra={"digest": request.digest, "peer": peers[0].node, "reason": error.message},
                )
                peers.pop(0)
        if request.anchored:
            raise FetchError(
                d.SOURCE_UNAVAILABLE,
                "no node holds this anchored model's digest: it resolved without the hub, so peers are its "
                "only source",
            )
        return self._manifest(config, request), [], token

    def _download_chain(
        self,
        attempt: Attempt,
        manifest: Manifest,
        chain: list[Peer | None],
        config: PluginConfig,
        token: str | None,
    ) -> None:
        """One source at a time (each peer, then the hub): every file not yet verified, resumed from
        its checkpoint, so a source that fails leaves the next only the bytes after it."""
        last: FetchError | None = None
        for peer in chain:
            jobs = [job for job in self._jobs(config, attempt, manifest, peer, token) if not job.done()]
            if not jobs:
                return
            large = sum(1 for job in jobs if job.entry.size > self.tuning.ranged_above)
            for job in jobs:
                job.alongside = max(1, min(large, config.concurrency))
            attempt.source = d.SOURCE_HUB if peer is None else d.SOURCE_PEER
            attempt.abort.clear()
            try:
                self._download(attempt, jobs, config, fallback=peer is not None)
                return
            except FetchError as error:
                if error.reason not in SOURCE_FAULTS or attempt.cancel.is_set():
                    raise
                last = error
                log.info(
                    "source failed; trying the next",
                    extra={
                        "digest": attempt.request.digest,
                        "source": "hub" if peer is None else f"peer {peer.node}",
                        "reason": error.reason,
                        "detail": error.detail,
                    },
                )
        if last is not None:
            raise last

    def _fail(self, attempt: Attempt, reason: str, message: str, detail: str) -> None:
        digest = attempt.request.digest
        if attempt.cancel.is_set() and reason in (d.CANCELED, d.SOURCE_UNAVAILABLE):
            reason, message = d.CANCELED, "no mount asked for this model for five minutes"
        failure = self.cache.record_failure(digest, reason, message, back_off=reason not in NO_BACKOFF)
        metrics.MATERIALIZATIONS.labels(reason).inc()
        log.warning(
            "materialization failed",
            extra={"digest": digest, "reason": reason, "detail": detail, "retry_at": failure.retry_at},
        )

    def _manifest(self, config: PluginConfig, request: Request) -> Manifest:
        connection = config.connection
        problem = connection.problem()
        if problem:
            raise FetchError(d.INVALID_REQUEST, problem)
        try:
            files = hf.list_files(connection, request.repository, request.commit, request.token)
            manifest = hf.manifest_of(files, request.allow, request.ignore, request.repository)
        except HubError as error:
            if error.reason in (d.ACCESS_DENIED, d.REVISION_NOT_FOUND):
                raise FetchError(d.ACCESS_DENIED, "the hub refused to list the model's files") from None
            if error.reason == d.SOURCE_UNAVAILABLE:
                raise FetchError(d.SOURCE_UNAVAILABLE, "the hub could not list the model's files") from None
            raise FetchError(d.INTEGRITY_MISMATCH, "the listed files do not form the manifest") from None
        if manifest.digest != request.digest:
            raise FetchError(d.INTEGRITY_MISMATCH, "the listed files do not match the manifest digest")
        return manifest

    def _jobs(
        self,
        config: PluginConfig,
        attempt: Attempt,
        manifest: Manifest,
        peer: Peer | None,
        token: str | None,
    ) -> list[FileDownload]:
        """One job per file, from ``peer`` (with this plugin's peer token) or the hub (with the
        mount's credential) when ``peer`` is None."""
        request, layout = attempt.request, self.cache.layout
        model = layout.partial_model(request.digest)
        base = f"{config.connection.base}/{request.repository}/resolve/{request.commit}/"
        limits = self.limits
        kind = d.SOURCE_HUB
        if peer is not None:
            assert self.peers is not None
            limits = Limits(RequestLimit(self.peers.streams_per_source), self.limits.rate, self.limits.pieces)
            kind = d.SOURCE_PEER

        def source(path: str) -> Source:
            if peer is None:
                return Source(config.connection, base + quote(path), request.token)
            assert self.peers is not None
            return self.peers.source(peer, request.digest, path, token)

        return [
            FileDownload(
                entry,
                model / entry.path,
                layout.state_file(request.digest, entry.path),
                source(entry.path),
                limits,
                self.tuning,
                functools.partial(attempt.add, source=kind),
                attempt.stopping,
            )
            for entry in sorted(manifest.files, key=lambda f: -f.size)
        ]

    def _reserve(self, attempt: Attempt) -> None:
        digest = attempt.request.digest
        marks = self.capacity.watermarks()
        if marks is None:
            raise FetchError(d.INVALID_REQUEST, "the node's configuration is missing or invalid")
        if self.reservations.try_reserve(digest, attempt.remaining, self.capacity.usage(), marks.high):
            return
        need = self.reservations.shortfall(digest, attempt.remaining(), self.capacity.usage(), marks.high)
        self.capacity.collect_for(digest, need)
        if not self.reservations.try_reserve(digest, attempt.remaining, self.capacity.usage(), marks.high):
            raise FetchError(
                d.INSUFFICIENT_CAPACITY,
                f"{_size(attempt.remaining())} do not fit under the high watermark ({marks.high}%) "
                "after collection",
            )

    def _download(
        self, attempt: Attempt, jobs: list[FileDownload], config: PluginConfig, *, fallback: bool = False
    ) -> None:
        """Run the jobs; the first failure stops the rest, unless another source follows
        (``fallback``) and the failure is the source's own: then the other files finish here and
        only the failed ones move on."""
        errors: list[FetchError] = []
        with ThreadPoolExecutor(max(1, config.concurrency), thread_name_prefix="model-file") as pool:
            futures = [pool.submit(job.run) for job in jobs if not job.done()]
            for future in as_completed(futures):
                try:
                    future.result()
                except FetchError as error:
                    errors.append(error)
                    if not (fallback and error.reason in SOURCE_FAULTS):
                        attempt.abort.set()
                except Exception:
                    attempt.abort.set()
                    raise
        if errors:
            real = [e for e in errors if e.reason != d.CANCELED]
            raise (real or errors)[0]
        if attempt.cancel.is_set():
            raise FetchError(d.CANCELED, "no mount asked for this model for five minutes")
