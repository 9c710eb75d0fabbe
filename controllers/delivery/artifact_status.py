"""What a ModelArtifact's status becomes after one observation (model-delivery spec §4.1), pure.

- **Resolution** happens once: a success writes ``status.resolved`` (commit, digest, count, size,
  times) and ``Resolved=True``; a failure writes ``Resolved=False`` with its reason and is retried.
- **Revalidation** never changes ``resolved``. The staircase: a refusal (``AccessDenied``,
  ``RevisionNotFound``) first makes ``Degraded=True`` and is retried in a minute; the same refusal
  again makes ``Resolved=False``. ``SourceUnavailable`` (or an unreadable Secret) only ever makes
  ``Degraded=True`` — a hub outage never revokes pinned weights. A deleted Secret, or one without
  ``token``, is ``Resolved=False`` at once. A later success restores ``Resolved=True`` with the same
  commit and digest.

``Ready`` (:func:`with_ready`, first among the conditions) repeats ``Resolved`` — its status, reason
and message — so ``kubectl wait --for=condition=Ready mart/<name>`` waits for the pinned weight
identity; an artifact that has not been looked at yet is ``Ready=False``, reason ``Resolving``. A
``Degraded`` artifact stays Ready: its pinned weights still serve.

Times are RFC 3339 strings (``Z``); the functions take ``now`` and never read a clock.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import delivery as d
from api.manifest import Manifest
from api.objects import Obj
from controllers import ready

RETRY = 60.0  # seconds: a refusal's second look, an outage's retry
RETRY_PERMANENT = 300.0  # a resolution refused for a reason only the hub or the user can change
REFUSALS = (d.ACCESS_DENIED, d.REVISION_NOT_FOUND)
RESOLVING = "Resolving"
_FIRST = {ready.READY: 0, d.RESOLVED: 1}


def stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def find(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    for cond in conditions or []:
        if cond.get("type") == kind:
            return cond
    return None


def set_condition(
    status: Obj, kind: str, state: str, reason: str, message: str, generation: int, now: dt.datetime
) -> None:
    """Put one condition into ``status``, keeping its transition time when its status holds."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    previous = find(status.get("conditions"), kind)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == state else None
    conditions.append(
        {
            "type": kind,
            "status": state,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": since or stamp(now),
            "observedGeneration": generation,
        }
    )
    status["conditions"] = sorted(conditions, key=lambda c: _FIRST.get(c["type"], len(_FIRST)))


def with_ready(status: Mapping[str, Any], generation: int, now: dt.datetime) -> Obj:
    """``status`` with ``Ready`` repeating ``Resolved`` (``False``, ``Resolving`` before any)."""
    out = dict(status)
    resolved = find(status.get("conditions"), d.RESOLVED)
    if resolved is None:
        verdict = ready.verdict(False, RESOLVING, "the source has not been resolved yet")
    else:
        verdict = ready.verdict(
            resolved.get("status") == "True", resolved.get("reason"), resolved.get("message")
        )
    set_condition(out, ready.READY, verdict.status, verdict.reason, verdict.message, generation, now)
    return out


@dataclass
class Step:
    status: Obj
    requeue: float | None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def _base(status: Mapping[str, Any] | None, generation: int) -> Obj:
    out = copy.deepcopy(dict(status or {}))
    out["observedGeneration"] = generation
    return out


def resolved_once(
    status: Mapping[str, Any] | None,
    commit: str,
    manifest: Manifest,
    generation: int,
    now: dt.datetime,
    expected: str | None = None,
) -> Step:
    """The first successful resolution (or an anchor mismatch)."""
    out = _base(status, generation)
    if expected and expected != manifest.digest:
        set_condition(
            out,
            d.RESOLVED,
            "False",
            d.DIGEST_MISMATCH,
            f"the files resolve to {manifest.digest}, not the expected {expected}",
            generation,
            now,
        )
        return Step(out, RETRY_PERMANENT)
    out["resolved"] = {
        "revision": commit,
        "manifestDigest": manifest.digest,
        "digestSource": d.DIGEST_SOURCE_HUB,
        "fileCount": len(manifest.files),
        "sizeBytes": manifest.size,
        "resolvedTime": stamp(now),
        "lastValidatedTime": stamp(now),
    }
    set_condition(out, d.RESOLVED, "True", d.REASON_RESOLVED, f"pinned commit {commit}", generation, now)
    set_condition(out, d.DEGRADED, "False", d.REASON_HEALTHY, "", generation, now)
    return Step(out, None)


def resolution_failed(
    status: Mapping[str, Any] | None, reason: str, message: str, generation: int, now: dt.datetime
) -> Step:
    out = _base(status, generation)
    set_condition(out, d.RESOLVED, "False", reason, message, generation, now)
    retry = (
        RETRY if reason in (d.SOURCE_UNAVAILABLE, d.SECRET_NOT_FOUND, d.CLAIM_NOT_FOUND) else RETRY_PERMANENT
    )
    return Step(out, retry)


def revalidated(status: Mapping[str, Any], generation: int, now: dt.datetime, interval: float) -> Step:
    out = _base(status, generation)
    out["resolved"] = {**out["resolved"], "lastValidatedTime": stamp(now)}
    resolved = find(out.get("conditions"), d.RESOLVED)
    message = resolved.get("message", "") if resolved and resolved.get("status") == "True" else ""
    if not message:
        message = f"pinned commit {out['resolved'].get('revision', '')}".strip()
    set_condition(out, d.RESOLVED, "True", d.REASON_RESOLVED, message, generation, now)
    set_condition(out, d.DEGRADED, "False", d.REASON_HEALTHY, "", generation, now)
    return Step(out, interval)


def revalidation_failed(
    status: Mapping[str, Any], reason: str, message: str, generation: int, now: dt.datetime
) -> Step:
    """The staircase: outages only degrade; a refusal seen twice in a row revokes."""
    out = _base(status, generation)
    degraded = find(out.get("conditions"), d.DEGRADED)
    if reason == d.SECRET_NOT_FOUND:
        set_condition(out, d.RESOLVED, "False", reason, message, generation, now)
        set_condition(out, d.DEGRADED, "True", reason, message, generation, now)
        return Step(out, RETRY)
    if (
        reason in REFUSALS
        and degraded
        and degraded.get("status") == "True"
        and degraded.get("reason") == reason
    ):
        set_condition(out, d.RESOLVED, "False", reason, message, generation, now)
    set_condition(out, d.DEGRADED, "True", reason, message, generation, now)
    return Step(out, RETRY)


def revalidation_due(
    status: Mapping[str, Any],
    now: dt.datetime,
    interval: float,
    *,
    secret_changed: bool,
    last_attempt: dt.datetime | None = None,
) -> float:
    """Seconds until the next revalidation (0: now): ``interval`` after the later of the status's
    last validation and the caller's last attempt. Degraded or revoked: a minute after the last
    attempt (the caller remembers it; after a restart, the condition's time stands in)."""
    if secret_changed:
        return 0.0
    degraded = find(status.get("conditions"), d.DEGRADED)
    resolved = find(status.get("conditions"), d.RESOLVED)
    last = parse_time((status.get("resolved") or {}).get("lastValidatedTime"))
    if (degraded and degraded.get("status") == "True") or (resolved and resolved.get("status") != "True"):
        times = [t for t in (last_attempt, last, parse_time((degraded or {}).get("lastTransitionTime"))) if t]
        return 0.0 if not times else max(0.0, RETRY - (now - max(times)).total_seconds())
    # Our own last probe counts too: the cached status may not show the write it made yet, and a
    # second probe on the word of that stale copy is a request the hub did not need.
    times = [t for t in (last, last_attempt) if t]
    if not times:
        return 0.0
    return max(0.0, interval - (now - max(times)).total_seconds())


def simple_resolution(
    status: Mapping[str, Any] | None, exists: bool, generation: int, now: dt.datetime, *, claim: str | None
) -> Step:
    """Claim sources are ``Resolved`` iff the claim exists; image sources on the first pass."""
    out = _base(status, generation)
    if claim is not None and not exists:
        set_condition(
            out,
            d.RESOLVED,
            "False",
            d.CLAIM_NOT_FOUND,
            f"PersistentVolumeClaim {claim} does not exist",
            generation,
            now,
        )
        return Step(out, None)
    out.setdefault("resolved", {"resolvedTime": stamp(now)})
    message = f"PersistentVolumeClaim {claim} exists" if claim is not None else "the image pins its digest"
    set_condition(out, d.RESOLVED, "True", d.REASON_RESOLVED, message, generation, now)
    return Step(out, None)


def held_digests(store: Mapping[str, Any]) -> list[str]:
    """The digests a NodeModelStore's status lists (an informer index: the stores holding one)."""
    models = (store.get("status") or {}).get("models")
    if not isinstance(models, list):
        return []
    found = {m.get("digest") for m in models if isinstance(m, dict)}
    return sorted(d for d in found if isinstance(d, str) and d)


def nodes_summary(stores: Sequence[Mapping[str, Any]], digest: str) -> Obj | None:
    """``status.nodes`` from the NodeModelStores listing ``digest`` (§2.1): counts by state and the
    mean progress of downloading nodes rounded down to a multiple of 5 (absent when none)."""
    ready = downloading = failed = 0
    percents: list[float] = []
    for store in stores:
        for model in (store.get("status") or {}).get("models") or []:
            if model.get("digest") != digest:
                continue
            state = model.get("state")
            if state == d.STATE_READY:
                ready += 1
            elif state == d.STATE_FAILED:
                failed += 1
            elif state == d.STATE_DOWNLOADING:
                downloading += 1
                size = model.get("sizeBytes") or 0
                if size:
                    percents.append(min(100.0, 100.0 * (model.get("downloadedBytes") or 0) / size))
    if not (ready or downloading or failed):
        return None
    out: Obj = {"ready": ready, "downloading": downloading, "failed": failed}
    if percents:
        out["downloadingPercent"] = int(sum(percents) / len(percents) // 5 * 5)
    return out
