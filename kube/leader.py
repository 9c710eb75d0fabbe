"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two worker replicas never both
reconcile.

The holder renews every ``renew`` seconds; a candidate takes the Lease only once it has not been
renewed for ``duration`` seconds.  Writes carry the Lease's resourceVersion, so two candidates racing
for an expired Lease cannot both win: the loser's update conflicts.  A holder that fails to renew
within ``renew_deadline`` steps down (the caller stops reconciling) before anyone else can take over.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable

from kube.client import ApiError, Client

log = logging.getLogger("controllers.leader")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


class LeaderElector:
    def __init__(
        self,
        client: Client,
        name: str,
        namespace: str,
        *,
        identity: str | None = None,
        duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry: float = 2.0,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        self.duration = duration
        self.renew_deadline = renew_deadline
        self.retry = retry
        self._leading = threading.Event()
        self._stop = threading.Event()

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def _try(self) -> bool:
        lease = self.client.get("Lease", self.name, self.namespace)
        now = _now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.duration),
            "renewTime": _micro(now),
        }
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": _micro(now), "leaseTransitions": 0},
            }
            try:
                self.client.create(body)
                return True
            except ApiError as error:
                if error.conflict:
                    return False
                raise
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renewed = _parse(current.get("renewTime")) or _parse(current.get("acquireTime"))
        held_for = current.get("leaseDurationSeconds") or self.duration
        expired = renewed is None or (now - renewed).total_seconds() > held_for
        if holder and holder != self.identity and not expired:
            return False
        new_spec = dict(current, **spec)
        if holder != self.identity:
            new_spec["acquireTime"] = _micro(now)
            new_spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        lease.setdefault("kind", "Lease")
        try:
            self.client.update(lease)
            return True
        except ApiError as error:
            if error.conflict:
                return False
            raise

    def run(self, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        """Campaign until stopped; call ``on_started`` on winning and ``on_stopped`` on losing."""
        last_renew = 0.0
        while not self._stop.is_set():
            try:
                won = self._try()
            except ApiError as error:
                log.warning("lease update failed", extra={"lease": self.name, "error": str(error)})
                won = False
            now = time.monotonic()
            if won:
                last_renew = now
                if not self.leading:
                    log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                    self._leading.set()
                    on_started()
            elif self.leading and now - last_renew > self.renew_deadline:
                log.warning("lost leadership", extra={"lease": self.name, "identity": self.identity})
                self._leading.clear()
                on_stopped()
            self._stop.wait(self.retry)
        if self.leading:
            self._leading.clear()
            on_stopped()
            self._release()

    def _release(self) -> None:
        """Give the Lease up on a clean shutdown so a peer takes over at once."""
        try:
            lease = self.client.get("Lease", self.name, self.namespace)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["renewTime"] = _micro(_now() - dt.timedelta(seconds=self.duration + 1))
                lease["spec"]["holderIdentity"] = ""
                lease.setdefault("kind", "Lease")
                self.client.update(lease)
        except ApiError:
            pass

    def stop(self) -> None:
        self._stop.set()
