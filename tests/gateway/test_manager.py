"""Subscriptions (gateway.manager) against a fake upstream: the readiness loop and its back-off,
one loop per cluster, force, unsubscribe cancelling a pending check, late checks, reads."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from gateway import manager as manager_module
from gateway import readiness
from gateway.events import DELETED, Bus
from gateway.kinds import KINDS
from gateway.manager import Manager, Settings
from gateway.readiness import Readiness
from gateway.sources import GPUStackAPISource, SourceError
from tests.gateway.fake_apiserver import FakeUpstream
from tests.gateway.serving import FAST
from tests.unit.gateway_objects import flavor, instance_type

IT, FLAVOR = KINDS["InstanceType"], KINDS["InstanceTypeFlavor"]


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(test(), 30))


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Checks:
    """The readiness check, counting the calls that returned (raised or not): the event the tests
    wait on before they assert that nothing more happened."""

    def __init__(self) -> None:
        self.started = 0
        self.returned = 0

    def __call__(self, client: Any, timeout: float) -> Readiness:
        self.started += 1
        try:
            return readiness.check(client, timeout)
        finally:
            self.returned += 1

    def settled(self) -> bool:
        return self.started == self.returned


def manager(upstream: FakeUpstream, settings: Settings = FAST, **kw: Any) -> tuple[Manager, Bus]:
    bus = Bus()
    return Manager(GPUStackAPISource(upstream.port), bus, settings, **kw), bus


def test_a_cluster_registers_once_its_operator_api_answers_and_is_read(upstream):
    a = upstream.cluster("a", token="secret")
    a.put(instance_type("t"))

    async def test() -> None:
        m, _ = manager(upstream)
        assert await m.subscribe("a", "secret", [IT])
        await until(lambda: m.clusters() == {"a": "registered"}, what="registration")
        snapshot = await m.snapshot(IT)
        assert [(c, o["metadata"]["name"]) for c, o in snapshot.pairs] == [("a", "t")]
        assert snapshot.warnings == []
        await m.close()

    run(test)


def test_a_cluster_subscribed_with_no_kinds_stays_registered_and_is_read_on_demand(upstream):
    a = upstream.cluster("a")
    a.put(flavor("f"))

    async def test() -> None:
        m, _ = manager(upstream)
        await m.subscribe("a", "", [])
        await until(lambda: m.clusters() == {"a": "registered"})
        claim = m.claim("a")
        assert claim is not None and claim.informers == {}
        snapshot = await m.snapshot(FLAVOR)  # InstanceTypeFlavor is watched from its first read
        assert [o["metadata"]["name"] for _, o in snapshot.pairs] == ["f"]
        assert sorted(claim.informers) == ["InstanceTypeFlavor"]
        # The on-demand watch is up and the readiness loop has ended: nothing left to change it.
        await until(claim.informers["InstanceTypeFlavor"].synced, what="the on-demand watch")
        await until(lambda: claim.task is not None and claim.task.done(), what="the readiness loop's end")
        assert m.clusters() == {"a": "registered"}
        await m.close()

    run(test)


def test_a_repeated_subscribe_starts_exactly_one_loop_and_force_restarts_it(upstream):
    a = upstream.cluster("a")
    a.discovery_status = 503

    async def test() -> None:
        m, _ = manager(upstream)
        assert await m.subscribe("a", "", [IT])
        first = m.claim("a")
        assert not await m.subscribe("a", "", [IT])
        assert not await m.subscribe("a", "", [])
        assert m.claim("a") is first
        await until(lambda: a.discovery_calls >= 2)
        assert await m.subscribe("a", "", [IT], force=True)
        second = m.claim("a")
        assert second is not first and first is not None and first.task is not None
        await until(lambda: first.task.done())
        # Cancelled, or ended on its own when a cancel lost to a finishing check (gateway.manager
        # stops a loop whose claim was replaced): either way it never registered.
        assert first.task.cancelled() or not first.registered
        await m.close()

    run(test)


def test_unsubscribe_stops_an_in_flight_check_and_a_late_check_never_registers(upstream):
    a = upstream.cluster("a")
    a.hold_discovery.clear()  # the check hangs in the upstream

    checks = Checks()

    async def test() -> None:
        m, bus = manager(upstream, check=checks)
        watcher = bus.subscribe("InstanceType", 100)
        await m.subscribe("a", "", [IT])
        first = m.claim("a")
        await until(lambda: a.discovery_calls == 1, what="the check in flight")
        assert await m.unsubscribe("a")
        assert first is not None and first.task is not None
        await until(lambda: first.task.done())
        assert m.clusters() == {}
        assert watcher.pending() == 0  # never registered: nothing to drop
        a.hold_discovery.set()  # the late answer arrives after the unsubscribe
        await until(lambda: checks.returned == 1, what="the late check's answer")
        assert m.clusters() == {}
        assert not first.registered
        await m.close()

    run(test)


def test_a_late_check_of_a_replaced_claim_does_not_touch_the_new_registration(upstream):
    a = upstream.cluster("a")
    started = threading.Event()
    release = threading.Event()
    calls = []
    late = threading.Event()

    def check(client: Any, timeout: float) -> Readiness:
        calls.append(client)
        if len(calls) == 1:  # the first claim's check: answers only after the second registered
            started.set()
            release.wait(10)
            try:
                return readiness.check(client, timeout)
            finally:
                late.set()
        return readiness.check(client, timeout)

    async def test() -> None:
        m, _ = manager(upstream, Settings(readiness_timeout=20, first_delay=0.05, max_delay=0.2), check=check)
        await m.subscribe("a", "", [IT])
        first = m.claim("a")
        await until(started.is_set)
        await m.subscribe("a", "", [IT], force=True)
        await until(lambda: m.clusters() == {"a": "registered"})
        second = m.claim("a")
        release.set()
        await until(late.is_set, what="the replaced claim's late answer")
        await until(lambda: first is not None and first.task is not None and first.task.done())
        assert m.claim("a") is second and second is not None and second.registered
        assert first is not None and not first.registered
        await m.close()

    a.put(instance_type("t"))
    run(test)


def test_a_stalled_check_is_abandoned_after_the_timeout_and_retried(upstream):
    a = upstream.cluster("a")
    a.hold_discovery.clear()

    async def test() -> None:
        m, _ = manager(upstream, Settings(readiness_timeout=0.3, first_delay=0.05, max_delay=0.1))
        await m.subscribe("a", "", [IT])
        await until(lambda: a.discovery_calls >= 2, what="a second check after the first stalled")
        claim = m.claim("a")
        assert claim is not None and "timeout" in claim.reason
        a.hold_discovery.set()
        await until(lambda: m.clusters() == {"a": "registered"})
        await m.close()

    run(test)


def test_a_check_that_timed_out_asks_nothing_more_until_the_next_one(upstream):
    """The client under the check does not retry a read on its own: the next discovery call is the
    manager's next check, after its back-off (urllib3's default would ask three more times)."""
    a = upstream.cluster("a")
    a.hold_discovery.clear()

    checks = Checks()

    async def test() -> None:
        m, _ = manager(upstream, Settings(readiness_timeout=0.2, first_delay=5, max_delay=5), check=checks)
        await m.subscribe("a", "", [IT])
        await until(lambda: (c := m.claim("a")) is not None and "timeout" in c.reason, what="the timeout")
        # The check's own call returns only once every retry underneath it gave up.
        await until(lambda: checks.returned == 1, what="the timed-out check's call to return")
        assert a.discovery_calls == 1
        a.hold_discovery.set()
        await m.close()

    run(test)


def test_failures_are_retried_with_growing_gaps_until_unsubscribe(upstream, caplog):
    a = upstream.cluster("a")
    a.discovery_status = 404
    caplog.set_level(logging.DEBUG, logger="gateway.manager")

    checks = Checks()

    async def test() -> None:
        m, _ = manager(upstream, Settings(readiness_timeout=2, first_delay=0.05, max_delay=0.2), check=checks)
        await m.subscribe("a", "", [IT])
        await until(lambda: a.discovery_calls >= 5, what="five checks")
        claim = m.claim("a")
        assert claim is not None and "is the operator installed" in claim.reason
        count = a.discovery_calls
        await m.unsubscribe("a")
        # The loop has ended and the check it had on the wire (if any) returned: none can follow.
        await until(lambda: claim.task is not None and claim.task.done(), what="the loop's end")
        await until(checks.settled, what="the last check's answer")
        assert a.discovery_calls <= count + 1
        await m.close()

    run(test)
    retries = [r for r in caplog.records if r.name == "gateway.manager" and hasattr(r, "retry_in_s")]
    # Five checks reached the server; the last may land after the unsubscribe and is not retried.
    assert [r.retry_in_s for r in retries[:4]] == [0.05, 0.1, 0.2, 0.2]
    assert [r.levelname for r in retries[:3]] == ["ERROR", "DEBUG", "DEBUG"]  # the first failure only


def test_the_default_back_off_doubles_from_five_seconds_and_caps_at_a_minute():
    assert [readiness.delay(n) for n in range(7)] == [5, 10, 20, 40, 60, 60, 60]
    assert readiness.delay(10_000) == 60


def test_a_token_the_proxy_refuses_is_retried_and_says_why(upstream):
    upstream.cluster("a", token="right")

    async def test() -> None:
        m, _ = manager(upstream)
        await m.subscribe("a", "wrong", [IT])
        claim = m.claim("a")
        await until(lambda: claim is not None and claim.failures >= 2)
        assert claim is not None and "refused the credentials" in claim.reason
        assert m.clusters() == {"a": "pending"}
        await m.close()

    run(test)


def test_an_api_without_instancetypes_is_not_ready(upstream):
    a = upstream.cluster("a")
    a.served = {"instances"}

    async def test() -> None:
        m, _ = manager(upstream)
        await m.subscribe("a", "", [IT])
        claim = m.claim("a")
        await until(lambda: claim is not None and claim.failures >= 1)
        assert claim is not None and "does not serve instancetypes" in claim.reason
        a.served = {"instancetypes"}
        await until(lambda: m.clusters() == {"a": "registered"})
        await m.close()

    run(test)


def test_changes_reach_the_bus_and_unsubscribe_drops_the_cluster_for_every_kind(upstream):
    a = upstream.cluster("a")
    a.put(instance_type("t"))

    async def test() -> None:
        m, bus = manager(upstream)
        watcher = bus.subscribe("InstanceType", 100)
        flavors = bus.subscribe("InstanceTypeFlavor", 100)
        await m.subscribe("a", "", [IT])
        claim = m.claim("a")
        assert claim is not None
        first = await watcher.next()
        assert first is not None and (first.type, first.cluster) == ("ADDED", "a")
        a.put(instance_type("t", ex=(2, 2, 8)))
        second = await watcher.next()
        assert second is not None and second.type == "MODIFIED"
        assert second.object is not None and second.object["status"]["accelerator"]["remaining"] == "2"
        a.put(instance_type("u"))
        await watcher.next()
        await m.unsubscribe("a")
        gone = await watcher.next()
        assert gone is not None and (gone.type, gone.cluster, gone.object) == (DELETED, "a", None)
        flavor_gone = await flavors.next()
        assert flavor_gone is not None and flavor_gone.object is None
        # A change after the unsubscribe reaches the stopped watch, which ends on it (its thread
        # returns without handing it on): once it has ended, nothing of it can reach the bus.
        informer = claim.informers["InstanceType"]
        a.put(instance_type("v"))
        await until(
            lambda: informer._thread is not None and not informer._thread.is_alive(), what="the watch's end"
        )
        assert watcher.pending() == 0
        await m.close()

    run(test)


def test_reads_visit_each_cluster_once_in_order_and_name_who_is_left_out(upstream):
    for name in ("b", "a", "c"):
        upstream.cluster(name).put(instance_type(f"t-{name}"))
    upstream.clusters["c"].discovery_status = 503
    upstream.clusters["b"].served = {"instancetypes"}

    async def test() -> None:
        m, _ = manager(upstream)
        for name in ("b", "a", "c"):
            await m.subscribe(name, "", [IT])
        await until(lambda: m.clusters() == {"a": "registered", "b": "registered", "c": "pending"})
        snapshot = await m.snapshot(IT)
        assert [c for c, _ in snapshot.pairs] == ["a", "b"]
        assert len(snapshot.warnings) == 1 and "'c' is not ready" in snapshot.warnings[0]
        only_a = await m.snapshot(IT, ["a", "a", "zz"])
        assert [c for c, _ in only_a.pairs] == ["a"]
        assert only_a.warnings == ["cluster 'zz' is not subscribed"]
        flavors = await m.snapshot(FLAVOR, ["b"])
        assert flavors.pairs == [] and flavors.warnings == ["cluster 'b' does not serve instancetypeflavors"]
        await m.close()

    run(test)


def test_a_subscribed_kind_the_cluster_does_not_serve_is_skipped(upstream):
    upstream.cluster("a")

    async def test() -> None:
        m, _ = manager(upstream)
        await m.subscribe("a", "", [IT, KINDS["InstancePersistentVolume"]])
        await until(lambda: m.clusters() == {"a": "registered"})
        claim = m.claim("a")
        assert claim is not None and sorted(claim.informers) == ["InstanceType"]
        await m.close()

    run(test)


def test_a_cluster_name_that_cannot_travel_in_a_path_is_refused():
    async def test() -> None:
        m = Manager(GPUStackAPISource(1), Bus(), FAST)
        for bad in ("../etc", "a/b", "", "-x"):
            with pytest.raises(SourceError) as error:
                await m.subscribe(bad, "", [])
            assert error.value.status == 400
        await m.close()

    run(test)


def test_a_listing_delivered_late_reaches_the_bus_before_prepare_returns(upstream, monkeypatch):
    """The informer queues its listing's events for the loop before it says it is synced; the loop
    may resume ``prepare`` first. Those deliveries must still be published before ``prepare``
    returns, so a watcher subscribing right after is not sent the listing as ADDED lines."""
    a = upstream.cluster("a")
    a.put(instance_type("existing"))

    class LateInformer(manager_module.Informer):
        raced = False

        def synced(self) -> bool:
            done = super().synced()
            if done and not LateInformer.raced:
                # What the informer's thread did last, as the loop first sees it synced: one
                # delivery queued on the loop that has not run yet.
                LateInformer.raced = True
                self._notify("ADDED", self.list()[0], None)
            return done

    monkeypatch.setattr(manager_module, "Informer", LateInformer)

    async def test() -> None:
        m, bus = manager(upstream)
        await m.subscribe("a", "", [])
        await until(lambda: m.clusters() == {"a": "registered"}, what="registration")
        reading = await m.prepare(IT, ["a"])
        subscription = bus.subscribe("InstanceType", 16)  # as a new watch does, no await between
        assert LateInformer.raced
        assert [o["metadata"]["name"] for _, o in reading.pairs()] == ["existing"]
        await asyncio.sleep(0)  # anything queued before the subscription has run now
        assert subscription.pending() == 0
        subscription.close()
        await m.close()

    run(test)
