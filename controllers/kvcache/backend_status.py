"""A backend's status from what its leader answers (kv-cache spec §5.1 step 8, §6.1).

:func:`observe` makes the poll's three reads (``/health``, ``/metrics``, ``/get_segments_detail``);
:func:`derive` is pure.  Capacity comes from the leader's gauges only and only while
``service_ready`` (an ungated ``/metrics`` reads all zeros while starting), and is cleared on a
failed scrape; a failed listing keeps the previous ``members`` and says so in ``MembersMounted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, UNKNOWN, Verdict, find, render
from controllers.kvcache import admin
from controllers.kvcache.figures import to_quantity

MAX_LISTING = 1000  # rows status.members may carry before the listing is withheld, never truncated
NEVER_STARTS = frozenset(
    {
        "CrashLoopBackOff",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "InvalidImageName",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
    }
)


@dataclass
class Observation:
    """The three reads of one poll; a read that failed carries its error instead."""

    health: admin.Health | None = None
    metrics: admin.Metrics | None = None
    segments: list[admin.Segment] | None = None
    health_error: admin.AdminError | None = None
    metrics_error: admin.AdminError | None = None
    segments_error: admin.AdminError | None = None


def observe(client: admin.AdminClient) -> Observation:
    seen = Observation()
    try:
        seen.health = client.health()
    except admin.AdminError as error:
        seen.health_error = error
        if error.kind == admin.UNREACHABLE:  # nothing listens: the other two reads would say the same
            seen.metrics_error = seen.segments_error = error
            return seen
    try:
        seen.metrics = client.metrics()
    except admin.AdminError as error:
        seen.metrics_error = error
    try:
        seen.segments = client.segments()
    except admin.AdminError as error:
        seen.segments_error = error
    return seen


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in _list(_dict(pod.get("status")).get("conditions"))
    )


def never_arrives(pod: Obj) -> str | None:
    """Why a member Pod will never become a member (cannot start, cannot be placed), or ``None``."""
    status = _dict(pod.get("status"))
    for condition in _list(status.get("conditions")):
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return f"Unschedulable: {condition.get('message') or 'no node fits'}"
    for container in _list(status.get("containerStatuses")) + _list(status.get("initContainerStatuses")):
        waiting = _dict(_dict(container.get("state")).get("waiting"))
        if waiting.get("reason") in NEVER_STARTS:
            return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
    return None


def _name(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("name") or "")


def capacity(seen: Observation, tiered: bool) -> Obj | None:
    """``{total, used}`` from the leader's gauges, or ``None`` when not observed."""
    if seen.health is None or not seen.health.service_ready or seen.metrics is None:
        return None
    total = seen.metrics.get("master_total_capacity_bytes")
    used = seen.metrics.get("master_allocated_bytes")
    if total is None:
        return None
    if tiered:
        total += seen.metrics.get("master_total_file_capacity_bytes") or 0
        used = (used or 0) + (seen.metrics.get("master_allocated_file_size_bytes") or 0)
    out: Obj = {"total": to_quantity(total)}
    if used is not None:
        out["used"] = to_quantity(used)
    return out


@dataclass(frozen=True, slots=True)
class Membership:
    rows: list[Obj] | None  # None: keep the previous listing
    verdict: Verdict


def membership(backend: Obj, seen: Observation, pods: list[Obj], groups: list[Any]) -> Membership:
    """``status.members`` joined to member Pods by advertised address, and ``MembersMounted``."""
    c = kv.COND_MEMBERS_MOUNTED
    if seen.segments is None:
        error = seen.segments_error
        if error is not None and error.kind == admin.REFUSED and error.status == 404:
            return Membership(
                [],
                Verdict(
                    c,
                    UNKNOWN,
                    kv.REASON_SEGMENT_LISTING_NOT_SERVED,
                    "the master serves no segment listing (before 0.3.12)",
                ),
            )
        return Membership(
            None,
            Verdict(
                c, FALSE, kv.REASON_LISTING_FAILED, f"the segment listing failed, previous list kept: {error}"
            ),
        )
    if len(seen.segments) > MAX_LISTING:
        return Membership(
            None,
            Verdict(
                c,
                FALSE,
                "ListingTooLarge",
                f"{len(seen.segments)} segments exceed the {MAX_LISTING} status can carry; previous list kept",
            ),
        )
    ready = [p for p in pods if _ready(p) and not _dict(p.get("metadata")).get("deletionTimestamp")]
    by_ip: dict[str, list[Obj]] = {}
    for pod in ready:
        by_ip.setdefault(str(_dict(pod.get("status")).get("podIP") or ""), []).append(pod)
    rows = []
    for segment in seen.segments:
        row: Obj = {
            "segmentID": segment.segment_id,
            "clientID": segment.client_id,
            "segmentName": segment.name,
            "protocol": segment.protocol,
            "state": segment.status,
        }
        candidates = by_ip.get(segment.host, [])
        nodes = {str(_dict(p.get("spec")).get("nodeName") or "") for p in candidates}
        media = {_medium(p, groups) for p in candidates}
        if len(nodes) == 1 and "" not in nodes:
            row["nodeName"] = nodes.pop()
        if len(media) == 1 and "" not in media:
            row["medium"] = media.pop()
        rows.append(row)
    listed = {s.host for s in seen.segments}
    ambiguous = sorted(ip for ip, group in by_ip.items() if len(group) > 1)
    missing = sorted(_name(p) for p in ready if str(_dict(p.get("status")).get("podIP") or "") not in listed)
    if ambiguous:
        verdict = Verdict(
            c,
            FALSE,
            kv.REASON_AMBIGUOUS_MEMBER_IDENTITY,
            f"ready member Pods share the address {', '.join(ambiguous)}; keep host-network groups on different nodes",
        )
    elif missing:
        verdict = Verdict(
            c, FALSE, "MembersNotListed", f"ready member Pods the leader does not list: {', '.join(missing)}"
        )
    elif not seen.segments:
        verdict = Verdict(c, FALSE, kv.REASON_NO_SEGMENTS, "the leader lists no mounted segment")
    else:
        verdict = Verdict(c, TRUE, "Mounted", f"{len(seen.segments)} segment(s) mounted")
    return Membership(rows, verdict)


def _medium(pod: Obj, groups: list[Any]) -> str:
    index = _dict(_dict(pod.get("metadata")).get("labels")).get(kv.LABEL_GROUP)
    if isinstance(index, str) and index.isdigit() and int(index) < len(groups):
        return str(_dict(groups[int(index)]).get("medium") or "")
    return ""


def pool_writes(seen: Observation) -> Verdict:
    c = kv.COND_POOL_WRITES
    metrics = seen.metrics
    if metrics is None:
        return Verdict(c, UNKNOWN, "NoReading", "no /metrics reading")
    used = [s.used_bytes for s in seen.segments] if seen.segments is not None else None
    if (metrics.get("master_put_end_requests_total") or 0) > 0 or (used and any(u > 0 for u in used)):
        return Verdict(
            c, TRUE, "WritesObserved", "a put ended since the leader started, or a member holds data"
        )
    started = (metrics.get("master_put_start_requests_total") or 0) > 0
    revoked = (metrics.get("master_put_revoke_requests_total") or 0) > 0
    if started and revoked and used is not None and not any(used):
        return Verdict(
            c, FALSE, "WritesRevoked", "puts started and were revoked while every member holds nothing"
        )
    return Verdict(c, UNKNOWN, "NoWritesYet", "no finished put observed since the leader started")


def _claimants(used_by: list[Any]) -> list[str]:
    out = []
    for ref in used_by:
        ref = _dict(ref)
        where = f"{ref.get('namespace')}/" if ref.get("namespace") else ""
        out.append(f"{ref.get('kind')} {where}{ref.get('name')}")
    return out


def _phase(
    backend: Obj,
    seen: Observation,
    is_managed: bool,
    pods: list[Obj],
    members: Membership,
    cap: Obj | None,
    deleting: str | None,
) -> tuple[str, str]:
    meta = _dict(backend.get("metadata"))
    claimants = _claimants(_list(_dict(backend.get("status")).get("usedBy")))
    if meta.get("deletionTimestamp"):
        held = (
            f"held while claimed by {', '.join(claimants)}"
            if claimants
            else deleting or "removing the leader and members"
        )
        return kv.PHASE_DELETING, held
    if seen.health is None:
        error = seen.health_error
        if is_managed and error is not None and error.kind == admin.UNREACHABLE:
            return kv.PHASE_PROVISIONING, f"the leader is not answering yet: {error}"
        return kv.PHASE_ERROR, f"the leader's admin address failed: {error}"
    if not seen.health.service_ready:
        return kv.PHASE_PROVISIONING, "the leader is starting (service_ready is false)"
    if seen.metrics is None:
        return kv.PHASE_ERROR, f"the leader's /metrics failed: {seen.metrics_error}"
    for pod in pods:
        why = never_arrives(pod)
        if why:
            return kv.PHASE_DEGRADED, f"member Pod {_name(pod)} will not start: {why}"
    if members.verdict.reason == "ListingTooLarge":
        return kv.PHASE_DEGRADED, members.verdict.message
    if cap is not None and cap.get("total") in ("0", 0):
        return (
            kv.PHASE_DEGRADED,
            f"{kv.REASON_NO_SEGMENTS}: the leader reports no capacity (no member mounted)",
        )
    if members.verdict.status == FALSE:
        return kv.PHASE_DEGRADED, f"{members.verdict.reason}: {members.verdict.message}"
    return kv.PHASE_READY, ""


def derive(
    backend: Obj,
    seen: Observation,
    *,
    endpoints: list[Obj],
    pods: list[Obj],
    stamp: str,
    extra: tuple[Verdict, ...] = (),
    tier: Verdict | None = None,
    deleting: str | None = None,
) -> Obj:
    """The backend's status (everything but ``usedBy``, which its consumers write).

    ``extra`` are the managed backend's ``RolloutComplete`` and ``ElectionObserved``; ``tier`` is a
    ``TierWasEmpty`` verdict, written once: a condition already in status is carried unchanged while
    the backend has a tier.  ``deleting`` says what a teardown past its claims is doing.  None of the
    three moves the phase."""
    spec = _dict(backend.get("spec"))
    spec_managed = _dict(_dict(spec.get("connection")).get("managed"))
    is_managed = bool(spec_managed)
    groups = _list(spec_managed.get("members"))
    tiered = any(_list(_dict(g).get("localDisks")) for g in groups) or not is_managed
    old = _dict(backend.get("status"))
    cap = capacity(seen, tiered)
    members = membership(backend, seen, pods, groups)
    ready = seen.health is not None and seen.health.service_ready
    said = seen.health_error or "service_ready is false"
    claimants = _claimants(_list(old.get("usedBy")))
    verdicts = [
        Verdict(kv.COND_LEADER_AVAILABLE, TRUE, "ServiceReady", "the leader reports service_ready")
        if ready
        else Verdict(kv.COND_LEADER_AVAILABLE, FALSE, "NotServiceReady", str(said)),
        members.verdict,
        Verdict(kv.COND_CAPACITY_OBSERVED, TRUE, "Scraped", f"total {cap['total']}")
        if cap is not None
        else Verdict(kv.COND_CAPACITY_OBSERVED, FALSE, "NotObserved", str(seen.metrics_error or said)),
        pool_writes(seen),
        Verdict(kv.COND_DELETABLE, FALSE, "Claimed", f"claimed by {', '.join(claimants)}")
        if claimants
        else Verdict(kv.COND_DELETABLE, TRUE, "Unclaimed", "no consumer claims this backend"),
        *extra,
    ]
    phase, message = _phase(backend, seen, is_managed, pods, members, cap, deleting)
    generation = _dict(backend.get("metadata")).get("generation")
    conditions = render(verdicts, old.get("conditions"), generation, stamp)
    if any(_list(_dict(g).get("localDisks")) for g in groups):
        written = find(old.get("conditions"), kv.COND_TIER_WAS_EMPTY)
        if written is not None:
            conditions.append(written)
        elif tier is not None:
            conditions += render([tier], None, generation, stamp)
    status: Obj = {
        "phase": phase,
        "phaseMessage": message,
        "conditions": conditions,
        "endpoints": endpoints,
        "members": members.rows if members.rows is not None else _list(old.get("members")),
    }
    if cap is not None:
        status["capacity"] = cap
    return status
