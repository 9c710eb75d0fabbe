"""Materialization against the local hub, without a cluster: one attempt per digest that concurrent
mounts join, atomic publication with a marker, failure reasons and back-off, cancellation with
resume, reservations against the high watermark, and collection."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from api import delivery as d
from modelhub import huggingface as hf
from modelhub.connection import HubConnection
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.capacity import Usage, Watermarks
from nodeplugins.modelmanager.config import PluginConfig
from nodeplugins.modelmanager.download import Limits, Tuning
from nodeplugins.modelmanager.layout import MARKER, Layout
from nodeplugins.modelmanager.ledger import journal_of
from nodeplugins.modelmanager.materialize import Blocked, InProgress, Materializer, Published, Request
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit
from tests.hub.server import Fault, HubServer
from tests.unit.delivery.conftest import LARGE_SIZE, TOKEN

TUNING = Tuning(
    chunk=64 << 10,
    piece_size=1 << 20,
    window=3,
    ranged_above=2 << 20,
    checkpoint_bytes=1 << 20,
    stall_timeout=1.0,
    retries=3,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeCapacity:
    """A filesystem of ``total`` bytes: ``base`` used by others plus what the cache holds."""

    def __init__(
        self, cache: NodeCache, total: int = 1 << 40, base: int = 0, high: int = 80, low: int = 70
    ) -> None:
        self.cache, self.total, self.base, self.high, self.low = cache, total, base, high, low
        self.referenced: set[str] = set()
        self.pinned: set[str] = set()
        self.materializer: Materializer | None = None

    def usage(self) -> Usage:
        held = sum(h.bytes for h in self.cache.held(set()))
        return Usage(self.total, self.base + held)

    def watermarks(self) -> Watermarks:
        return Watermarks(self.high, self.low)

    def collect_for(self, digest: str, need: int) -> None:
        running = set(self.materializer.running()) if self.materializer else set()
        self.cache.collect(
            usage=self.usage(),
            high=self.high,
            low=self.low,
            referenced=self.referenced,
            pinned=self.pinned,
            running=running,
            need=need,
        )


class Node:
    def __init__(
        self,
        hub: HubServer,
        root: Path,
        *,
        clock: Clock | None = None,
        config: bool = True,
        total: int = 1 << 40,
        base: int = 0,
    ) -> None:
        self.clock = clock or Clock()
        self.layout = Layout(root)
        self.cache = NodeCache(self.layout, clock=self.clock)
        self.capacity = FakeCapacity(self.cache, total=total, base=base)
        self.config = PluginConfig(1, 80, 70, 4, 0, HubConnection(hub.endpoint)) if config else None
        self.materializer = Materializer(
            self.cache,
            Limits(RequestLimit(4), ByteRate(0)),
            lambda: self.config,
            self.capacity,
            tuning=TUNING,
            clock=self.clock,
        )
        self.capacity.materializer = self.materializer

    def settle(self, request: Request) -> object:
        outcome = self.materializer.ensure(request)
        self.materializer.wait(request.digest, timeout=60)
        return outcome


def request_for(hub: HubServer, repo: str = "org/public", token: str | None = None, **kw) -> Request:
    res = hf.resolve(HubConnection(hub.endpoint), repo, "main", token, kw.get("allow"), kw.get("ignore"))
    return Request(
        res.manifest.digest,
        repo,
        res.commit,
        tuple(kw.get("allow") or ()),
        tuple(kw.get("ignore") or ()),
        token,
    )


def test_first_mount_starts_an_attempt_that_publishes_atomically(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    first = node.settle(request)
    assert isinstance(first, InProgress)
    assert node.materializer.ensure(request) == Published()
    tree = node.layout.tree(request.digest)
    assert (tree / MARKER).read_text() == request.digest + "\n"
    assert (tree / "model" / "model.safetensors").read_bytes() == large_file.read_bytes()
    assert (tree / "model" / "tokenizer" / "vocab.txt").read_bytes() == b"a\nb\nc\n"
    assert not (tree / "state").exists() and not node.layout.partial(request.digest).exists()
    assert (tree / "manifest").read_bytes().startswith(b"gpustack-manifest v1\n")


def test_concurrent_mounts_join_one_attempt_and_each_byte_is_fetched_once(
    hub: HubServer, tmp_path: Path
) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    hub.clear_log()
    hub.set_faults(Fault("slow", kind="cdn", rate=8 << 20))
    outcomes: list[object] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(node.materializer.ensure(request))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(o, InProgress) for o in outcomes)
    assert len(node.materializer.running()) == 1
    node.materializer.wait(request.digest, 60)
    assert node.materializer.ensure(request) == Published()
    assert len(hub.log("tree")) == 2  # one listing (two pages)
    assert sum(e["sent"] for e in hub.log("cdn")) == LARGE_SIZE
    assert len([e for e in hub.log("resolve") if e["path"].endswith("/config.json")]) == 1


def test_a_wrong_digest_is_an_integrity_mismatch_with_back_off(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache")
    good = request_for(hub)
    wrong = Request("sha256:" + "0" * 64, good.repository, good.commit)
    node.settle(wrong)
    outcome = node.materializer.ensure(wrong)
    assert isinstance(outcome, Blocked)
    assert outcome.failure.reason == d.INTEGRITY_MISMATCH
    assert outcome.failure.retry_at == node.clock.now + 60
    node.clock.now += 61
    node.settle(wrong)
    again = node.materializer.ensure(wrong)
    assert isinstance(again, Blocked) and again.failure.retry_at == node.clock.now + 120


def test_tampered_file_fails_the_attempt_and_is_discarded(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    hub.repos.tamper("org/public", "README.md")
    node.settle(request)
    outcome = node.materializer.ensure(request)
    assert isinstance(outcome, Blocked) and outcome.failure.reason == d.INTEGRITY_MISMATCH
    assert not node.layout.published(request.digest)
    assert not (node.layout.partial_model(request.digest) / "README.md").exists()
    assert "README" not in outcome.failure.message and "org/public" not in outcome.failure.message


def test_a_refused_credential_is_access_denied(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub, "org/private", TOKEN)
    stolen = Request(request.digest, request.repository, request.commit, token="hf_wrong")
    node.settle(stolen)
    outcome = node.materializer.ensure(stolen)
    assert isinstance(outcome, Blocked) and outcome.failure.reason == d.ACCESS_DENIED
    node.clock.now += 61
    node.settle(request)
    assert node.materializer.ensure(request) == Published()
    assert node.cache.ledger.failures == {}  # a success resets the back-off


def test_no_configuration_is_invalid_request_without_back_off(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache", config=False)
    request = request_for(hub)
    node.settle(request)
    failure = node.cache.ledger.failures[request.digest]
    assert failure.reason == d.INVALID_REQUEST and failure.retry_at is None
    assert isinstance(node.materializer.ensure(request), InProgress)  # starts again at once


def test_an_idle_attempt_is_canceled_and_the_next_mount_resumes(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    hub.set_faults(Fault("slow", kind="cdn", rate=2 << 20))
    node.materializer.ensure(request)
    deadline = time.monotonic() + 30
    while node.materializer.running()[request.digest].received < 3 << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.clock.now += 301
    assert node.materializer.cancel_idle() == [request.digest]
    node.materializer.wait(request.digest, 30)
    failure = node.cache.ledger.failures[request.digest]
    assert failure.reason == d.CANCELED and failure.retry_at is None
    assert node.layout.partial_bytes(request.digest) > 0  # partial files kept
    hub.set_faults()
    hub.clear_log()
    node.settle(request)
    assert node.materializer.ensure(request) == Published()
    assert 0 < sum(e["sent"] for e in hub.log("cdn")) < LARGE_SIZE  # resumed, not restarted


def test_a_reservation_that_does_not_fit_collects_first(hub: HubServer, tmp_path: Path) -> None:
    clock = Clock()
    node = Node(hub, tmp_path / "cache", clock=clock, total=100 << 20, base=60 << 20)  # high: 80 MiB
    hub.repos.create("org/old")
    hub.repos.commit("org/old", {"old.safetensors": bytes(4 << 20)})
    old = request_for(hub, "org/old")
    node.settle(old)
    assert node.layout.published(old.digest)
    node.capacity.base = 66 << 20  # 66 + 4 held + 12 wanted > 80
    big = request_for(hub)
    node.settle(big)
    outcome = node.materializer.ensure(big)
    assert isinstance(outcome, Blocked) and outcome.failure.reason == d.INSUFFICIENT_CAPACITY
    assert node.layout.published(old.digest)  # used less than ten minutes ago: kept
    clock.now += 3600 * 2  # back-off over; the old tree is now stale
    node.settle(big)
    assert node.materializer.ensure(big) == Published()
    assert not node.layout.published(old.digest)  # collected to make room


def test_two_downloads_that_fit_alone_but_not_together_are_never_both_admitted(
    hub: HubServer, tmp_path: Path
) -> None:
    node = Node(hub, tmp_path / "cache", total=100 << 20, base=60 << 20)  # 20 MiB under the high watermark
    hub.repos.create("org/second")
    hub.repos.commit("org/second", {"weights.safetensors": bytes(range(256)) * (50 * 1024)})  # 12.5 MiB
    first, second = request_for(hub), request_for(hub, "org/second")
    hub.set_faults(Fault("slow", kind="cdn", rate=4 << 20))
    node.materializer.ensure(first)
    deadline = time.monotonic() + 30
    while node.materializer.running()[first.digest].total is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    node.settle(second)
    outcome = node.materializer.ensure(second)
    assert isinstance(outcome, Blocked) and outcome.failure.reason == d.INSUFFICIENT_CAPACITY
    node.materializer.wait(first.digest, 60)
    assert node.materializer.ensure(first) == Published()


def test_a_tree_without_its_marker_is_not_published(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    node.settle(request)
    (node.layout.tree(request.digest) / MARKER).unlink()
    assert not node.layout.published(request.digest)
    assert node.layout.published_digests() == []


def test_status_of_a_failure_names_no_tenant(hub: HubServer, tmp_path: Path) -> None:
    node = Node(hub, tmp_path / "cache")
    request = request_for(hub)
    hub.set_faults(Fault("status", kind="tree", status=403))
    node.settle(request)
    failure = node.cache.ledger.failures[request.digest]
    assert failure.reason == d.ACCESS_DENIED
    assert "org" not in failure.message and "public" not in failure.message
    on_disk = [p for p in (node.layout.ledger, journal_of(node.layout.ledger)) if p.exists()]
    assert on_disk and all(TOKEN not in p.read_text() and "org/public" not in p.read_text() for p in on_disk)


@pytest.mark.parametrize("rate", [0, 1 << 30])
def test_limits_apply_across_downloads(hub: HubServer, tmp_path: Path, rate: int) -> None:
    node = Node(hub, tmp_path / "cache")
    node.materializer.limits = Limits(RequestLimit(1), ByteRate(rate))
    request = request_for(hub)
    node.settle(request)
    assert node.materializer.ensure(request) == Published()
