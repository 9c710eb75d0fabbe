"""What one ModelPrefetch pass does (model-delivery spec §4.9), pure: which warm-up Pods to create
and delete, which node copies lapsed, which nodes it pins its digest on, and its status.

- The targets are :func:`api.prefetch.target_nodes` within the binding's grant (a target outside it
  is counted in ``Degraded``, never warmed). A target whose NodeModelStore does not list the digest
  gets one warm-up Pod: the artifact's own CSI volume (the same attributes a consumer mounts), a
  restricted security context, ``find`` + ``sha256sum`` over every file, then it exits. It never
  carries Kueue's queue label (it would be gated forever). A completed Pod stays as the node's
  record; when the node's copy is gone and it did not lapse, the Pod is replaced (warmed again).
- ``ttlAfterLastUse``: an unreferenced Ready copy whose ``lastUsedTime`` (hour-truncated, so the
  hour is counted whole: a copy never lapses early) is older than the TTL lapses: its Pod is marked,
  its pin withdrawn, and once collection removed it, it is not warmed again; ``Lapsed`` is True when
  the shortfall below the bar is made of lapsed copies only. A copy mounted again is un-marked.
- Pins: with ``retention.pinned``, every target node of the grant that did not lapse.
- ``Available`` once ``readyNodes`` reaches ``minReady`` (0: every target); ``Progressing`` while
  some target is warming; ``Degraded`` when a node gave up (its reason and retry time), a target
  lies outside the grant, or the artifact, binding or CSIDriver is missing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import delivery as d
from api import prefetch as pf
from api.naming import fnv1a64
from api.objects import Obj
from api.settings import parse_duration
from controllers.delivery.artifact_status import parse_time, set_condition
from controllers.delivery.consumption import Gate, plan_instance_volume

TRUE, FALSE = "True", "False"
HOUR = 3600.0
WARMUP_SCRIPT = f'find {d.MODEL_MOUNT_PATH} -type f -exec sha256sum {{}} + >/dev/null && echo "warm: $(find {d.MODEL_MOUNT_PATH} -type f | wc -l) files read"'


@dataclass(frozen=True)
class Facts:
    """What one pass reads, for one prefetch."""

    prefetch: Mapping[str, Any]
    artifact: Mapping[str, Any] | None
    binding: Mapping[str, Any] | None
    targets: pf.Targets
    granted: set[str]
    node_stores: Mapping[str, Mapping[str, Any]]  # by node
    pods: Mapping[str, Mapping[str, Any]]  # this prefetch's warm-up Pods, by node
    csi_driver_present: bool
    image: str
    now: dt.datetime


@dataclass
class Plan:
    status: Obj
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # Pod names
    mark_lapsed: list[str] = field(default_factory=list)  # Pod names
    clear_lapsed: list[str] = field(default_factory=list)
    pinned_nodes: list[str] = field(default_factory=list)
    digest: str = ""
    requeue: float | None = None


def pod_name(prefetch: str, node: str) -> str:
    base = prefetch[:40].rstrip("-.")
    return f"{base}-warm-{fnv1a64(node)[:12]}"


def prefetch_label(prefetch: str) -> str:
    """The Pods' label value: the prefetch's name when it is a label value, else its hash."""
    if len(prefetch) <= 63 and prefetch.replace("-", "").replace(".", "").isalnum():
        return prefetch
    return "h-" + fnv1a64(prefetch)


def _entry(store: Mapping[str, Any] | None, digest: str) -> Mapping[str, Any] | None:
    for model in ((store or {}).get("status") or {}).get("models") or []:
        if isinstance(model, Mapping) and model.get("digest") == digest:
            return model
    return None


def _finished(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def _lapsed_mark(pod: Mapping[str, Any] | None) -> bool:
    return ((pod or {}).get("metadata") or {}).get("annotations", {}).get(
        d.ANNOTATION_PREFETCH_LAPSED
    ) == "true"


def render_pod(
    prefetch: Mapping[str, Any], artifact: Mapping[str, Any], node: str, volume: Mapping[str, Any], image: str
) -> Obj:
    meta = prefetch.get("metadata") or {}
    name = str(meta.get("name") or "")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, node),
            "namespace": meta.get("namespace"),
            "labels": {
                d.LABEL_PREFETCH: prefetch_label(name),
                "app.kubernetes.io/managed-by": "gpustack-operator",
            },
            "annotations": {d.ANNOTATION_PREFETCH_NODE: node},
            "ownerReferences": [
                {
                    "apiVersion": "worker.gpustack.ai/v1",
                    "kind": d.KIND_PREFETCH,
                    "name": name,
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "OnFailure",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": d.WARMUP_CONTAINER,
                    "image": image,
                    "command": ["sh", "-c", WARMUP_SCRIPT],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                    "volumeMounts": [
                        {"name": d.VOLUME_NAME, "mountPath": d.MODEL_MOUNT_PATH, "readOnly": True}
                    ],
                }
            ],
            "volumes": [{"name": d.VOLUME_NAME, **volume}],
        },
    }


def _ttl(prefetch: Mapping[str, Any]) -> float | None:
    raw = ((prefetch.get("spec") or {}).get("retention") or {}).get("ttlAfterLastUse")
    if not isinstance(raw, str):
        return None
    try:
        seconds = parse_duration(raw)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def _blocked(facts: Facts, reason: str, message: str, *, keep_pods: bool) -> Plan:
    """A pass that cannot warm: every condition says why; Pods stay only when ``keep_pods``."""
    generation = int((facts.prefetch.get("metadata") or {}).get("generation") or 0)
    status: Obj = {"conditions": list((facts.prefetch.get("status") or {}).get("conditions") or [])}
    status.update(desiredNodes=0, readyNodes=0, downloadingNodes=0)
    now = facts.now
    set_condition(status, d.PREFETCH_PROGRESSING, FALSE, reason, message, generation, now)
    set_condition(status, d.PREFETCH_AVAILABLE, FALSE, reason, message, generation, now)
    set_condition(status, d.PREFETCH_DEGRADED, TRUE, reason, message, generation, now)
    set_condition(status, d.PREFETCH_LAPSED, FALSE, d.REASON_NOT_LAPSED, "", generation, now)
    delete = [] if keep_pods else [str(p["metadata"]["name"]) for p in facts.pods.values()]
    return Plan(status, delete=delete)


def plan(facts: Facts) -> Plan:
    prefetch, artifact = facts.prefetch, facts.artifact
    spec = prefetch.get("spec") or {}
    name = str(((spec.get("artifactRef") or {}).get("name")) or "")
    if artifact is None:
        return _blocked(
            facts,
            d.REASON_ARTIFACT_NOT_FOUND,
            f"ModelArtifact {name} does not exist in this namespace",
            keep_pods=False,
        )
    resolved = pf.resolved_digest(artifact)
    if resolved is None:
        return _blocked(
            facts,
            d.REASON_ARTIFACT_NOT_RESOLVED,
            f"ModelArtifact {name} is not Resolved: nothing new is warmed until it is",
            keep_pods=True,
        )
    source = (artifact.get("spec") or {}).get("source") or {}
    if not (source.get("huggingFace") or source.get("modelScope")):
        return _blocked(
            facts,
            d.REASON_NOT_NODE_DELIVERED,
            f"ModelArtifact {name} is a claim or image source: it is mounted from its volume, never downloaded "
            "to a node's cache, so there is nothing to prefetch",
            keep_pods=False,
        )
    if facts.binding is None:
        grant = str(((spec.get("bindingRef") or {}).get("name")) or "")
        return _blocked(
            facts,
            d.REASON_BINDING_NOT_FOUND,
            f"ModelStoreBinding {grant} does not exist in this namespace: the grant pays for the bytes",
            keep_pods=False,
        )
    volume = plan_instance_volume(artifact, name, csi_driver_present=facts.csi_driver_present)
    if isinstance(volume, Gate):
        return _blocked(facts, d.REASON_NODE_DELIVERY_UNAVAILABLE, volume.message, keep_pods=True)
    digest, _ = resolved
    return _warm(facts, digest, volume.source)


def _warm(facts: Facts, digest: str, volume: Mapping[str, Any]) -> Plan:
    prefetch, now = facts.prefetch, facts.now
    meta = prefetch.get("metadata") or {}
    spec = prefetch.get("spec") or {}
    generation = int(meta.get("generation") or 0)
    pinned = bool((spec.get("retention") or {}).get("pinned"))
    ttl = _ttl(prefetch)
    targets = [n for n in facts.targets.nodes if n in facts.granted]
    outside = [n for n in facts.targets.nodes if n not in facts.granted]
    out = Plan({"conditions": list((prefetch.get("status") or {}).get("conditions") or [])}, digest=digest)
    ready = downloading = 0
    lapsed_gone = 0
    failures: dict[str, int] = {}
    retry: list[str] = []
    warming = 0
    stamp = now.timestamp()
    next_check: float | None = None
    for node in targets:
        pod = facts.pods.get(node)
        entry = _entry(facts.node_stores.get(node), digest)
        state = (entry or {}).get("state")
        lapsed = _lapsed_mark(pod)
        if state == d.STATE_READY:
            ready += 1
            used = parse_time((entry or {}).get("lastUsedTime"))
            expired = False
            if ttl is not None and used is not None and not (entry or {}).get("referenced"):
                expiry = used.timestamp() + HOUR + ttl  # the hour lastUsedTime truncates is counted whole
                expired = stamp >= expiry
                if not expired:
                    next_check = expiry if next_check is None else min(next_check, expiry)
            if expired and pod is not None and not lapsed:
                out.mark_lapsed.append(str(pod["metadata"]["name"]))
            elif not expired and lapsed and pod is not None:
                out.clear_lapsed.append(str(pod["metadata"]["name"]))
            lapsed = expired
        elif state == d.STATE_DOWNLOADING:
            downloading += 1
            warming += 1
        elif state == d.STATE_FAILED:
            reason = str((entry or {}).get("reason") or "Failed")
            failures[reason] = failures.get(reason, 0) + 1
            when = (entry or {}).get("retryTime")
            if when:
                retry.append(str(when))
        elif lapsed:
            lapsed_gone += 1
        elif facts.node_stores.get(node) is None:
            warming += 1  # the node runs no plugin (yet): its Pod would wait on the mount
        else:
            warming += 1
            if pod is not None and _finished(pod):
                out.delete.append(str(pod["metadata"]["name"]))  # its copy is gone: warm it again
        if pod is None and state != d.STATE_READY and not lapsed:
            out.create.append(render_pod(prefetch, facts.artifact or {}, node, volume, facts.image))
        if pinned and not lapsed:
            out.pinned_nodes.append(node)
    wanted = set(targets)
    out.delete += [str(p["metadata"]["name"]) for n, p in sorted(facts.pods.items()) if n not in wanted]
    desired = len(targets)
    min_ready = spec.get("minReady") or 0
    bar = min_ready if isinstance(min_ready, int) and min_ready > 0 else desired
    status = out.status
    status.update(desiredNodes=desired, readyNodes=ready, downloadingNodes=downloading)
    if desired == 0:
        why = (
            f"every target node lies outside the binding's stores ({len(outside)})"
            if outside
            else "the placement selects no node (with no placement: no deployment of this namespace references the artifact yet)"
        )
        set_condition(status, d.PREFETCH_AVAILABLE, FALSE, d.REASON_NO_TARGETS, why, generation, now)
    elif ready >= bar:
        set_condition(
            status,
            d.PREFETCH_AVAILABLE,
            TRUE,
            d.REASON_WARM,
            f"{ready} of {desired} target node(s) hold it",
            generation,
            now,
        )
    else:
        set_condition(
            status,
            d.PREFETCH_AVAILABLE,
            FALSE,
            d.REASON_BELOW_MIN_READY,
            f"{ready} of {desired} target node(s) hold it; {bar} needed",
            generation,
            now,
        )
    if warming:
        set_condition(
            status,
            d.PREFETCH_PROGRESSING,
            TRUE,
            d.REASON_WARMING,
            f"warming {warming} node(s), {downloading} downloading",
            generation,
            now,
        )
    else:
        set_condition(
            status,
            d.PREFETCH_PROGRESSING,
            FALSE,
            d.REASON_WARM if desired else d.REASON_NO_TARGETS,
            "",
            generation,
            now,
        )
    problems = []
    if failures:
        listed = ", ".join(f"{reason} on {count}" for reason, count in sorted(failures.items()))
        when = f"; next attempt after {min(retry)}" if retry else ""
        problems.append((d.REASON_MATERIALIZATION_FAILED, f"node(s) gave up: {listed}{when}"))
    if outside:
        problems.append(
            (
                d.REASON_OUTSIDE_GRANT,
                f"{len(outside)} target node(s) lie outside the binding's stores and are not warmed",
            )
        )
    if problems:
        set_condition(
            status,
            d.PREFETCH_DEGRADED,
            TRUE,
            problems[0][0],
            "; ".join(m for _, m in problems),
            generation,
            now,
        )
    else:
        set_condition(status, d.PREFETCH_DEGRADED, FALSE, d.REASON_HEALTHY_PREFETCH, "", generation, now)
    shortfall = max(bar - ready, 0)
    if desired and shortfall and lapsed_gone and lapsed_gone == desired - ready:
        set_condition(
            status,
            d.PREFETCH_LAPSED,
            TRUE,
            d.REASON_TTL_EXPIRED,
            f"{lapsed_gone} node copy(ies) lapsed past ttlAfterLastUse, were unpinned and are not warmed again",
            generation,
            now,
        )
    else:
        set_condition(status, d.PREFETCH_LAPSED, FALSE, d.REASON_NOT_LAPSED, "", generation, now)
    if next_check is not None:
        out.requeue = max(next_check - stamp, 1.0)
    return out


def pins(plans: Sequence[tuple[str, Sequence[str]]]) -> dict[str, list[str]]:
    """The union of every prefetch's pins per node: ``plans`` is ``(digest, nodes)`` per prefetch."""
    out: dict[str, set[str]] = {}
    for digest, nodes in plans:
        for node in nodes:
            out.setdefault(node, set()).add(digest)
    return {node: sorted(digests) for node, digests in out.items()}


def owner_of(pod: Mapping[str, Any]) -> str | None:
    """The ModelPrefetch a warm-up Pod belongs to (its controller owner reference)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == d.KIND_PREFETCH and ref.get("controller"):
            return str(ref.get("name"))
    return None


def pod_node(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(
        (meta.get("annotations") or {}).get(d.ANNOTATION_PREFETCH_NODE)
        or (pod.get("spec") or {}).get("nodeName")
        or ""
    )
