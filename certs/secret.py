"""Serving certificates kept in a Secret the worker manages (operations spec D.5, issue 13).

Unless it is given certificates (``worker --cert-dir``, e.g. a cert-manager Secret mounted), the
worker keeps its CA and serving pair in one ``kubernetes.io/tls`` Secret in the system namespace:
``tls.crt``, ``tls.key``, ``ca.crt`` and ``ca.key``.  Every replica runs the same loop:

- the first replica to find no Secret issues a CA and a serving pair and creates it; a replica that
  loses that race (409) reads the winner's, so every replica serves one certificate and the
  webhook configurations carry one CA;
- a serving pair that expires within ``rotate_before``, or lacks a name a replica needs, is
  re-issued under the same CA and written with the Secret's resourceVersion: of two replicas
  rotating at once one write conflicts and that replica reads the other's;
- each replica writes what the Secret holds into its own directory whenever it changed, and the
  server's reloading TLS context (``certs.tls``) picks the new pair up; a changed CA is handed to a
  callback, which re-applies the webhook configurations' ``caBundle``.

:func:`plan` is the pure decision; :func:`ensure` and :class:`Keeper` do the I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from certs import issue
from kube.client import ApiError

log = logging.getLogger("certs.secret")

SECRET_TYPE = "kubernetes.io/tls"
KEY_CERT, KEY_KEY, KEY_CA, KEY_CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
DEFAULT_ROTATE_BEFORE = dt.timedelta(days=30)
Action = Literal["keep", "issue", "rotate"]


@dataclass(frozen=True, slots=True)
class Pair:
    """What a replica serves: the CA (for caBundle) and its serving certificate and key."""

    ca_cert: bytes
    cert: bytes
    key: bytes


def _data(secret: dict[str, Any] | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value)
        except (ValueError, TypeError):
            continue
    return out


def plan(
    secret: dict[str, Any] | None,
    dns_names: list[str],
    ips: list[str],
    rotate_before: dt.timedelta = DEFAULT_ROTATE_BEFORE,
) -> Action:
    """What the Secret needs: ``issue`` (a new CA and pair), ``rotate`` (a new pair, same CA) or
    ``keep``.  A pair whose names miss one of ``dns_names``/``ips`` is rotated (names are only
    ever added, so replicas asking for different extra names converge instead of fighting)."""
    data = _data(secret)
    ca_left = issue.remaining_pem(data.get(KEY_CA, b""))
    if secret is None or ca_left is None or KEY_CA_KEY not in data or ca_left < rotate_before:
        return "issue"
    left = issue.remaining_pem(data.get(KEY_CERT, b""))
    if left is None or KEY_KEY not in data or left < rotate_before:
        return "rotate"
    have_dns, have_ips = issue.sans_of_pem(data[KEY_CERT])
    if not set(dns_names) <= have_dns or not set(ips) <= have_ips:
        return "rotate"
    return "keep"


def _encoded(values: dict[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in values.items()}


def render(
    name: str,
    namespace: str,
    secret: dict[str, Any] | None,
    action: Action,
    dns_names: list[str],
    ips: list[str],
    validity: dt.timedelta = issue.SERVING_VALIDITY,
) -> dict[str, Any]:
    """The Secret after ``action`` (``issue`` or ``rotate``) on ``secret``."""
    data = _data(secret)
    if action == "issue":
        ca_cert, ca_key = issue.new_ca()
    else:
        ca_cert, ca_key = data[KEY_CA], data[KEY_CA_KEY]
        have_dns, have_ips = issue.sans_of_pem(data[KEY_CERT]) if KEY_CERT in data else (set(), set())
        dns_names = sorted(set(dns_names) | have_dns, key=lambda n: (n not in dns_names, n))
        ips = sorted(set(ips) | have_ips)
    cert, key = issue.new_serving(ca_cert, ca_key, dns_names, ips, validity)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpustack-operator"},
        },
        "data": _encoded({KEY_CERT: cert, KEY_KEY: key, KEY_CA: ca_cert, KEY_CA_KEY: ca_key}),
    }
    if secret is not None:
        body["metadata"]["resourceVersion"] = (secret.get("metadata") or {}).get("resourceVersion")
        body["metadata"]["labels"] = {
            **((secret.get("metadata") or {}).get("labels") or {}),
            **body["metadata"]["labels"],
        }
    return body


def pair_of(secret: dict[str, Any]) -> Pair:
    data = _data(secret)
    return Pair(data[KEY_CA], data[KEY_CERT], data[KEY_KEY])


def ensure(
    client: Any,
    name: str,
    namespace: str,
    dns_names: list[str],
    ips: list[str],
    rotate_before: dt.timedelta = DEFAULT_ROTATE_BEFORE,
    validity: dt.timedelta = issue.SERVING_VALIDITY,
) -> tuple[Pair, Action]:
    """The Secret's pair after issuing or rotating it when :func:`plan` says so (conflict-safe)."""
    for _ in range(8):
        secret = client.get("Secret", name, namespace)
        action = plan(secret, dns_names, ips, rotate_before)
        if action == "keep" and secret is not None:
            return pair_of(secret), action
        body = render(name, namespace, secret, action, dns_names, ips, validity)
        try:
            written = client.create(body) if secret is None else client.update(body)
        except ApiError as error:
            if error.conflict:  # another replica issued or rotated first: read theirs
                continue
            raise
        log.info(
            "serving certificate issued" if action == "issue" else "serving certificate rotated",
            extra={"secret": f"{namespace}/{name}"},
        )
        return pair_of(written), action
    raise ApiError(409, "Conflict", f"Secret {namespace}/{name} kept changing while it was being written")


def write_pair(directory: Path, pair: Pair) -> None:
    """The pair into ``directory`` (key before certificate, each renamed into place)."""
    paths = issue.Paths(directory)
    directory.mkdir(parents=True, exist_ok=True)
    issue._write(paths.key, pair.key, 0o600)
    issue._write(paths.cert, pair.cert, 0o644)
    issue._write(paths.ca_cert, pair.ca_cert, 0o644)


class Keeper:
    """Keeps ``directory`` equal to the Secret (or, given ``provided``, only watches ``ca.crt``
    there) and reports a changed CA to ``on_ca``; runs :meth:`check` every ``interval`` seconds."""

    def __init__(
        self,
        client: Any,
        directory: Path,
        *,
        name: str,
        namespace: str,
        dns_names: list[str],
        ips: list[str],
        rotate_before: dt.timedelta = DEFAULT_ROTATE_BEFORE,
        validity: dt.timedelta = issue.SERVING_VALIDITY,
        provided: bool = False,
        interval: float = 30.0,
        on_ca: Callable[[bytes], None] | None = None,
    ) -> None:
        self.client = client
        self.directory = directory
        self.name = name
        self.namespace = namespace
        self.dns_names = dns_names
        self.ips = ips
        self.rotate_before = rotate_before
        self.validity = validity
        self.provided = provided
        self.interval = interval
        self.on_ca = on_ca
        self.ca: bytes = b""
        self._written: Pair | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def paths(self) -> issue.Paths:
        return issue.Paths(self.directory)

    def check(self) -> None:
        """One pass: re-read (and issue or rotate) the Secret, write what changed, report a new CA."""
        if self.provided:
            ca = self.paths.ca_cert.read_bytes() if self.paths.ca_cert.is_file() else b""
        else:
            pair, _ = ensure(
                self.client,
                self.name,
                self.namespace,
                self.dns_names,
                self.ips,
                self.rotate_before,
                self.validity,
            )
            if pair != self._written:
                write_pair(self.directory, pair)
                self._written = pair
            ca = pair.ca_cert
        if ca != self.ca:
            changed = bool(self.ca)
            self.ca = ca
            if changed and self.on_ca is not None:
                log.info("webhook CA changed; re-applying caBundle")
                self.on_ca(ca)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception as error:  # the next pass retries; the served pair stays in place
                log.warning("certificate check failed", extra={"error": f"{type(error).__name__}: {error}"})

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="certificates", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
