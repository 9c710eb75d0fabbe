"""The hardware partitions behind partitioned grants: created at ``Allocate``, reused on a retry,
shown to the SSH sidecar only while alive, reclaimed when their Pod ends (§6.5).

The allocator reserves (card, profile, placement) under the per-node mutex; :meth:`Partitions.
materialize` then makes that reservation real on the card — one GPU instance at the placement and
one compute instance covering all of it (a manufacturer's :class:`Hardware`, e.g. NVML's MIG) — and
hands back the :class:`Instance` whose device id the container is given.

Every instance this agent creates has an **ownership marker**, a small JSON file under the agent's
state directory, keyed by the owning (Pod UID, container).  It is written before the instance is
created and completed after, survives an agent restart (the instances survive too: they live in the
driver), and drives everything that follows:

- *reuse*: a retried ``Allocate`` for the same container, or the first after a restart, finds its
  marker and its live instance and gets the same device;
- *visibility*: the sidecar of a Pod gets the instance its owner container holds, checked alive
  (the recorded GPU instance still exists and still carries the recorded device UUID, since ids are
  reassigned); a missing marker, another card, a profile the card no longer offers or a gone
  instance fails closed;
- *reclaim*: when the owner no longer needs it (its Pod ended or was deleted, its reservation was
  given back), the compute instance then the GPU instance are destroyed.  ``IN_USE`` (a process
  still runs on it) is retried with a backoff, a bounded number of times, then at every sweep, with
  a log line naming the straggler; the reclaimer never waits while holding a card, so allocations
  and reclaims on other cards — and the next attempt on the same card — are never blocked.

Each card has its own lock: creation, liveness checks and destruction on one card never interleave,
while different cards proceed in parallel.  Instances nobody's marker names (carved by hand) are
left alone; a reservation whose placement one of them occupies is refused, naming it.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("devicemanager.partitions")

RETRY_FIRST_S = 0.5  # the first retry of an IN_USE destroy; doubled per attempt
RETRY_MAX_S = 8.0
RETRY_ATTEMPTS = 8  # then a straggler: re-checked at every sweep
SWEEP_PERIOD_S = 30.0


class PartitionError(Exception):
    """The partition cannot be made, found or shown; the message says what and why."""


class InUse(PartitionError):
    """A process still runs on the instance: it cannot be destroyed yet."""


@dataclass(frozen=True, slots=True)
class Owner:
    uid: str
    namespace: str
    pod: str
    container: str

    @property
    def key(self) -> str:
        """The marker's name: a Pod UID and a container name are both file-name safe."""
        return f"{self.uid}.{self.container}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod} container {self.container}"


@dataclass(frozen=True, slots=True)
class Instance:
    """One partition as the driver holds it."""

    card: str
    profile: str
    start: int
    length: int
    gpu_instance: int
    compute_instance: int
    device: str  # what a container is handed (a MIG UUID); "" when it has no single compute instance


class Hardware(Protocol):
    """A manufacturer's partition driver (NVML's MIG for NVIDIA)."""

    def create(self, card: str, profile: str, start: int, length: int) -> Instance: ...

    def instances(self, card: str) -> list[Instance]: ...

    def alive(self, instance: Instance) -> bool: ...

    def destroy(self, instance: Instance) -> bool: ...


@dataclass(frozen=True, slots=True)
class Marker:
    owner: Owner
    card: str
    profile: str
    start: int
    length: int
    instance: Instance | None = None  # None while being created

    def reserves(self, card: str, profile: str, start: int, length: int) -> bool:
        return (self.card, self.profile, self.start, self.length) == (card, profile, start, length)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "owner": {
                "uid": self.owner.uid,
                "namespace": self.owner.namespace,
                "pod": self.owner.pod,
                "container": self.owner.container,
            },
            "card": self.card,
            "profile": self.profile,
            "placement": {"start": self.start, "length": self.length},
            "state": "creating" if self.instance is None else "ready",
        }
        if self.instance is not None:
            body["gpuInstance"] = self.instance.gpu_instance
            body["computeInstance"] = self.instance.compute_instance
            body["device"] = self.instance.device
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> Marker:
        raw = json.loads(data)
        owner = Owner(**{k: str(raw["owner"][k]) for k in ("uid", "namespace", "pod", "container")})
        card, profile = str(raw["card"]), str(raw["profile"])
        start, length = int(raw["placement"]["start"]), int(raw["placement"]["length"])
        instance = None
        if raw.get("state") == "ready":
            instance = Instance(
                card,
                profile,
                start,
                length,
                int(raw["gpuInstance"]),
                int(raw["computeInstance"]),
                str(raw["device"]),
            )
        return Marker(owner, card, profile, start, length, instance)


class Markers:
    """The ownership markers on disk: one file per owner, replaced atomically."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> Marker | None:
        try:
            return Marker.decode(self._path(key).read_bytes())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as error:
            log.warning("unreadable ownership marker; ignored", extra={"marker": key, "error": str(error)})
            return None

    def put(self, marker: Marker) -> None:
        path = self._path(marker.owner.key)
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "wb") as out:
            out.write(marker.encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def drop(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self) -> list[str]:
        return sorted(p.name.removesuffix(".json") for p in self.directory.glob("*.json"))

    def all(self) -> Iterator[Marker]:
        for key in self.keys():
            marker = self.get(key)
            if marker is not None:
                yield marker


def _overlaps(instance: Instance, start: int, length: int) -> bool:
    return start < instance.start + instance.length and instance.start < start + length


class Partitions:
    """Materialize, show and reclaim partitions on one node (one per device manager)."""

    def __init__(
        self,
        hardware: Hardware,
        markers: Markers,
        *,
        clock: Callable[[], float] = time.monotonic,
        sweep_period: float = SWEEP_PERIOD_S,
    ) -> None:
        self.hardware = hardware
        self.markers = markers
        self.clock = clock
        self.sweep_period = sweep_period
        # Set by the allocator: does the owner still need its partition?  Has it seen the node's Pods?
        self.is_live: Callable[[str], bool] = lambda _key: True
        self.is_synced: Callable[[], bool] = lambda: False
        self.on_reclaimed: Callable[[], None] = lambda: None  # an instance left the hardware
        self._lingering: dict[str, Marker] = {}  # released, not destroyed yet: still on the card
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._due: list[tuple[float, str]] = []  # (when, owner key)
        self._attempts: dict[str, int] = {}
        self._wanted: dict[str, float] = {}  # when each queued owner is next attempted
        self._cond = threading.Condition()
        self._stopping = False
        self._next_sweep = 0.0
        self._thread: threading.Thread | None = None

    @contextmanager
    def _card(self, card: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(card, threading.Lock())
        with lock:
            yield

    # --- materialization ------------------------------------------------------------------------------
    def materialize(self, owner: Owner, card: str, profile: str, start: int, length: int) -> Instance:
        """The instance backing ``owner``'s reservation: its own if it has one alive (a retry, a
        restart), else a new one at exactly that placement."""
        with self._card(card):
            marker = self.markers.get(owner.key)
            if marker is not None:
                if marker.reserves(card, profile, start, length):
                    found = marker.instance or self._at(card, start, length, profile)
                    if found is not None and found.device and self.hardware.alive(found):
                        if marker.instance is None:
                            self.markers.put(replace(marker, instance=found))
                        log.info("partition reused", extra={"owner": str(owner), "device": found.device})
                        return found
                else:
                    self._destroy_locked(marker)  # re-reserved elsewhere: the old instance goes first
                self.markers.drop(owner.key)
            self._clear_locked(card, start, length)
            self.markers.put(Marker(owner, card, profile, start, length))
            try:
                instance = self.hardware.create(card, profile, start, length)
            except PartitionError:
                self.markers.drop(owner.key)
                raise
            self.markers.put(Marker(owner, card, profile, start, length, instance))
        log.info(
            "partition created",
            extra={"owner": str(owner), "card": card, "profile": profile, "device": instance.device},
        )
        return instance

    def _at(self, card: str, start: int, length: int, profile: str) -> Instance | None:
        for instance in self.hardware.instances(card):
            if (instance.start, instance.length, instance.profile) == (start, length, profile):
                return instance
        return None

    def _clear_locked(self, card: str, start: int, length: int) -> None:
        """Make room at the placement: an instance left by an owner that no longer needs it is
        reclaimed now; anything else there refuses the reservation."""
        occupants = [i for i in self.hardware.instances(card) if _overlaps(i, start, length)]
        if not occupants:
            return
        owners = {
            (m.instance.gpu_instance if m.instance else None, m.start, m.length): m
            for m in self.markers.all()
            if m.card == card
        }
        for occupant in occupants:
            marker = owners.get((occupant.gpu_instance, occupant.start, occupant.length)) or owners.get(
                (None, occupant.start, occupant.length)
            )
            if marker is None:
                raise PartitionError(
                    f"card {card}: memory slices {occupant.start}-{occupant.start + occupant.length - 1} hold "
                    f"a {occupant.profile} GPU instance (id {occupant.gpu_instance}) this device manager did "
                    "not create; destroy it or let the node drain"
                )
            if not self.is_synced() or self.is_live(marker.owner.key):
                raise PartitionError(
                    f"card {card}: memory slices {occupant.start}-{occupant.start + occupant.length - 1} "
                    f"belong to the partition of {marker.owner}"
                )
            try:
                self._destroy_locked(marker)
                with self._cond:
                    self._lingering.pop(marker.owner.key, None)
            except InUse:
                raise PartitionError(
                    f"card {card}: the partition {marker.owner} held at memory slices "
                    f"{occupant.start}-{occupant.start + occupant.length - 1} still has a process on it; "
                    "it is reclaimed once that process exits"
                ) from None
            self.markers.drop(marker.owner.key)

    def _destroy_locked(self, marker: Marker) -> None:
        instance = marker.instance or self._at(marker.card, marker.start, marker.length, marker.profile)
        if instance is not None and self.hardware.destroy(instance):
            log.info("partition destroyed", extra={"owner": str(marker.owner), "device": instance.device})

    # --- the sidecar ------------------------------------------------------------------------------------
    def visible(self, owner: Owner, card: str, offered: frozenset[str]) -> Instance:
        """The live instance ``owner`` holds on ``card`` (``offered``: the profiles the card offers
        now); :class:`PartitionError` — fail closed — when there is none to show."""
        with self._card(card):
            marker = self.markers.get(owner.key)
            if marker is None:
                raise PartitionError(f"{owner} has no ownership marker: no partition of it to make visible")
            if marker.card != card:
                raise PartitionError(f"the partition of {owner} is on card {marker.card}, not {card}")
            if marker.profile not in offered:
                raise PartitionError(f"card {card} no longer offers profile {marker.profile} of {owner}")
            if marker.instance is None or not self.hardware.alive(marker.instance):
                raise PartitionError(f"the partition of {owner} is gone or was recreated on card {card}")
            return marker.instance

    # --- reclaim ----------------------------------------------------------------------------------------
    def release(self, key: str) -> None:
        """Reclaim the partition of owner ``key`` (if it has one) as soon as possible."""
        marker = self.markers.get(key)
        with self._cond:
            self._schedule(key, self.clock())
            if marker is not None:
                self._lingering[key] = marker
            self._cond.notify()

    def lingering(self) -> list[Marker]:
        """Partitions released but still on their card (being reclaimed, or in use): the ledger
        has freed them, the hardware not yet — a new placement should go elsewhere meanwhile."""
        with self._cond:
            return list(self._lingering.values())

    def _schedule(self, key: str, when: float) -> None:
        self._attempts.setdefault(key, 0)
        self._wanted[key] = when
        heapq.heappush(self._due, (when, key))

    def sweep(self) -> list[str]:
        """Queue every marker whose owner no longer needs its partition (level-based: after a
        restart, a missed event or a straggler's bound)."""
        keys = self.markers.keys()  # read first: a marker written after this is not judged
        orphans = [key for key in keys if not self.is_live(key)]
        found = {key: self.markers.get(key) for key in orphans}
        with self._cond:
            for key, marker in found.items():
                if key not in self._wanted:
                    self._schedule(key, self.clock())
                if marker is not None:
                    self._lingering[key] = marker
        return orphans

    def reclaim(self, key: str) -> bool:
        """One attempt at owner ``key``'s partition: True when nothing is left to do."""
        marker = self.markers.get(key)
        if marker is None:
            return True
        with self._card(marker.card):
            if self.is_live(key):
                return True  # needed again (a retry re-reserved it): not ours to destroy
            marker = self.markers.get(key)
            if marker is None:
                return True
            self._destroy_locked(marker)  # InUse propagates: the marker stays for the next attempt
            self.markers.drop(key)
        log.info("partition reclaimed", extra={"owner": str(marker.owner), "card": marker.card})
        return True

    def run_due(self) -> float | None:
        """Run the reclaims that are due (and the sweep when it is); the time of the next one."""
        now = self.clock()
        if now >= self._next_sweep and self.is_synced():
            self._next_sweep = now + self.sweep_period
            self.sweep()
        while True:
            with self._cond:
                if not self._due or self._due[0][0] > now:
                    break
                when, key = heapq.heappop(self._due)
                if self._wanted.get(key) != when:
                    continue  # superseded by a later release() or retry
                attempts = self._attempts.get(key, 0)
            delay = 0.0
            try:
                done = self.reclaim(key)
            except InUse as error:
                done = False
                attempts += 1
                if attempts == RETRY_ATTEMPTS:
                    log.warning(
                        "partition still in use after bounded retries; re-checked every sweep",
                        extra={"owner": key, "error": str(error)},
                    )
                delay = (
                    min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (attempts - 1))
                    if attempts < RETRY_ATTEMPTS
                    else self.sweep_period
                )
            except Exception as error:  # the driver failed: try again later, never stop reclaiming
                done = False
                attempts += 1
                delay = self.sweep_period
                log.warning("reclaiming a partition failed", extra={"owner": key, "error": str(error)})
            with self._cond:
                if self._wanted.get(key) != when:
                    continue  # released again meanwhile: that entry decides
                if done:
                    self._attempts.pop(key, None)
                    self._wanted.pop(key, None)
                    freed = self._lingering.pop(key, None) is not None
                else:
                    self._attempts[key] = attempts
                    self._schedule(key, now + delay)
                    freed = False
            if freed:
                self.on_reclaimed()
        with self._cond:
            upcoming = [self._due[0][0]] if self._due else []
            if self.is_synced():
                upcoming.append(self._next_sweep)
            return min(upcoming) if upcoming else None

    def pending(self) -> list[str]:
        """Owners whose partition still waits to be reclaimed."""
        with self._cond:
            return sorted(self._attempts)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="partitions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            following = self.run_due()
            with self._cond:
                if self._stopping:
                    return
                wait = 1.0 if following is None else max(0.0, min(1.0, following - self.clock()))
                if not (self._due and self._due[0][0] <= self.clock()):
                    self._cond.wait(wait)
                if self._stopping:
                    return
