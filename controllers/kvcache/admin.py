"""The Mooncake master's HTTP admin API, as the KV-cache controllers read and write it.

One port serves ``/health``, ``/metrics``, ``/get_segments_detail`` and the tenant quota ledger
(``/api/v1/tenant_quotas``); payloads are written down in ``docs/mooncake-master.md`` and checked
against the real master in ``tests/mooncake/``.  Plain ``http.client``: a redirect is an answer to
report, never to follow; bodies are bounded; every failure is an :class:`AdminError` saying which.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

TIMEOUT_S = 5.0
MAX_BODY = 8 * 1024 * 1024
QUOTAS = "/api/v1/tenant_quotas"

# The store's own error names (error_message of a {"success": false, ...} answer).
UNAVAILABLE_IN_CURRENT_MODE = "UNAVAILABLE_IN_CURRENT_MODE"  # multi-tenancy off
TENANT_NOT_EMPTY = "TENANT_NOT_EMPTY"
OBJECT_NOT_FOUND = "OBJECT_NOT_FOUND"
PERSISTENT_FAIL = "PERSISTENT_FAIL"  # the policy file could not be written

UNREACHABLE = "Unreachable"
REDIRECTED = "Redirected"
GARBAGE = "Garbage"
REFUSED = "Refused"


class AdminError(Exception):
    """A read or write the master did not answer as asked: ``kind`` is :data:`UNREACHABLE`,
    :data:`REDIRECTED`, :data:`GARBAGE` or :data:`REFUSED` (the store said no; ``store_error`` is its
    error name, ``status`` the HTTP status)."""

    def __init__(self, kind: str, message: str, *, status: int = 0, store_error: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.store_error = store_error


@dataclass(frozen=True, slots=True)
class Health:
    service_ready: bool
    role: str


@dataclass(frozen=True, slots=True)
class Segment:
    segment_id: str
    client_id: str
    name: str
    endpoint: str  # te_endpoint: the member's advertised transfer address
    protocol: str
    status: str
    used_bytes: int
    capacity_bytes: int

    @property
    def host(self) -> str:
        """The advertised host of the member (joined to Pod IPs)."""
        address = self.endpoint or self.name
        return address.rsplit(":", 1)[0].strip("[]")


@dataclass(frozen=True, slots=True)
class TenantQuota:
    tenant: str
    requested_bytes: int
    effective_bytes: int
    charged_bytes: int
    admission_closed: bool
    over_quota: bool
    explicit: bool


@dataclass(frozen=True, slots=True)
class Metrics:
    """A Prometheus exposition: unlabelled samples by name, labelled ones by (name, labels text)."""

    plain: dict[str, float]
    labelled: dict[tuple[str, str], float]

    def get(self, name: str) -> float | None:
        return self.plain.get(name)


def parse_metrics(text: str) -> Metrics:
    plain: dict[str, float] = {}
    labelled: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        if rest:
            labels, _, value = rest.partition("}")
            fields = value.split()
        else:
            labels = ""
            fields = line.split()
            name = fields[0] if fields else ""
            fields = fields[1:]
        if not name or not fields:
            raise AdminError(GARBAGE, f"/metrics line is not a sample: {line[:120]!r}")
        try:
            number = float(fields[0])
        except ValueError:
            raise AdminError(GARBAGE, f"/metrics value is not a number: {line[:120]!r}") from None
        if labels:
            labelled[(name.strip(), labels)] = number
        else:
            plain[name.strip()] = number
    return Metrics(plain, labelled)


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AdminError(GARBAGE, f"field {key!r} is not a number: {value!r}")
    return int(value)


def _bool(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key)
    if not isinstance(value, bool):
        raise AdminError(GARBAGE, f"field {key!r} is not a boolean: {value!r}")
    return value


def _quota(doc: Any) -> TenantQuota:
    if not isinstance(doc, dict) or not isinstance(doc.get("tenant_id"), str):
        raise AdminError(
            GARBAGE, f"a tenant quota snapshot is not an object with a tenant_id: {str(doc)[:200]}"
        )
    return TenantQuota(
        tenant=doc["tenant_id"],
        requested_bytes=_int(doc, "requested_quota_bytes"),
        effective_bytes=_int(doc, "effective_quota_bytes"),
        charged_bytes=_int(doc, "charged_bytes"),
        admission_closed=_bool(doc, "admission_closed"),
        over_quota=_bool(doc, "over_quota"),
        explicit=_bool(doc, "has_explicit_policy"),
    )


def _segment(doc: Any) -> Segment:
    if not isinstance(doc, dict):
        raise AdminError(GARBAGE, "a segment is not an object")
    text: dict[str, str] = {
        k: v if isinstance(v := doc.get(k), str) else ""
        for k in ("segment_id", "client_id", "segment_name", "te_endpoint", "protocol", "status")
    }
    if not text["segment_id"]:
        raise AdminError(GARBAGE, "a segment carries no segment_id")
    return Segment(
        segment_id=text["segment_id"],
        client_id=text["client_id"],
        name=text["segment_name"],
        endpoint=text["te_endpoint"],
        protocol=text["protocol"],
        status=text["status"],
        used_bytes=_int(doc, "allocator_used_bytes"),
        capacity_bytes=_int(doc, "size_bytes"),
    )


class AdminClient:
    """The admin port of one master, ``host:port``."""

    def __init__(self, address: str, *, timeout: float = TIMEOUT_S) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.host = host.strip("[]")
        self.port = int(port) if port.isdigit() else 0
        self.timeout = timeout

    def _call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if not self.host or not self.port:
            raise AdminError(UNREACHABLE, f"{self.address!r} is not host:port")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read(MAX_BODY + 1)
        except (TimeoutError, OSError, http.client.HTTPException) as error:
            raise AdminError(
                UNREACHABLE, f"{method} http://{self.address}{path}: {error or type(error).__name__}"
            ) from None
        finally:
            conn.close()
        if len(data) > MAX_BODY:
            raise AdminError(GARBAGE, f"{method} {path}: the answer exceeds {MAX_BODY} bytes")
        if 300 <= response.status < 400:
            raise AdminError(
                REDIRECTED,
                f"{method} {path} answered {response.status} (to {response.getheader('Location')!r}); "
                "the admin address must be the master itself: redirects are not followed",
                status=response.status,
            )
        return response.status, data

    def _json(
        self, method: str, path: str, body: bytes | None = None, *, ok: tuple[int, ...] = (200,)
    ) -> Any:
        status, data = self._call(method, path, body)
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = None
            if status in ok:
                raise AdminError(
                    GARBAGE, f"{method} {path} answered {status} with a body that is not JSON: {data[:120]!r}"
                ) from None
        if status in ok:
            return doc
        name = doc.get("error_message", "") if isinstance(doc, dict) else ""
        raise AdminError(
            REFUSED,
            f"{method} {path} answered {status} {name or data[:120]!r}",
            status=status,
            store_error=str(name),
        )

    # -- reads ------------------------------------------------------------------------------------
    def health(self) -> Health:
        doc = self._json("GET", "/health")
        if not isinstance(doc, dict) or not isinstance(doc.get("service_ready"), bool):
            raise AdminError(GARBAGE, f"/health is not the master's health document: {str(doc)[:200]}")
        role = doc.get("role")
        return Health(doc["service_ready"], role if isinstance(role, str) else "")

    def metrics(self) -> Metrics:
        status, data = self._call("GET", "/metrics")
        if status != 200:
            raise AdminError(REFUSED, f"GET /metrics answered {status}", status=status)
        try:
            return parse_metrics(data.decode())
        except UnicodeDecodeError:
            raise AdminError(GARBAGE, "/metrics is not text") from None

    def segments(self) -> list[Segment]:
        """The leader's segment listing; a 404 (a master before 0.3.12) raises REFUSED with status 404."""
        doc = self._json("GET", "/get_segments_detail")
        if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list):
            raise AdminError(GARBAGE, f"/get_segments_detail is not a segment listing: {str(doc)[:200]}")
        return [_segment(s) for s in doc["segments"]]

    def tenant_quotas(self) -> dict[str, TenantQuota]:
        doc = self._json("GET", QUOTAS)
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise AdminError(GARBAGE, f"{QUOTAS} is not a list of tenant quotas: {str(doc)[:200]}")
        return {q.tenant: q for q in map(_quota, doc["data"])}

    def tenant_quota(self, tenant: str) -> TenantQuota | None:
        try:
            doc = self._json("GET", f"{QUOTAS}?tenant_id={quote(tenant, safe='')}")
        except AdminError as error:
            if error.kind == REFUSED and error.store_error == OBJECT_NOT_FOUND:
                return None
            raise
        return _quota(doc.get("data") if isinstance(doc, dict) else None)

    # -- writes -----------------------------------------------------------------------------------
    def put_quota(self, tenant: str, ceiling_bytes: int) -> TenantQuota:
        """Write ``tenant``'s ceiling; the answer carries the store's grant."""
        body = json.dumps({"requested_quota_bytes": ceiling_bytes}).encode()
        doc = self._json("PUT", f"{QUOTAS}?tenant_id={quote(tenant, safe='')}", body)
        return _quota(doc.get("data") if isinstance(doc, dict) else None)

    def delete_quota(self, tenant: str) -> None:
        """Release ``tenant``'s ledger entry; already absent counts as released.  A tenant still
        holding objects raises REFUSED with ``store_error == TENANT_NOT_EMPTY``."""
        try:
            self._json("DELETE", f"{QUOTAS}?tenant_id={quote(tenant, safe='')}")
        except AdminError as error:
            if error.kind == REFUSED and error.store_error == OBJECT_NOT_FOUND:
                return
            raise
