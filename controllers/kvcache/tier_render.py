"""What a member group's local disk tier renders (kv-cache spec §5.1 steps 7 and 9).

Declaring ``members[].localDisks[0]`` is the whole switch: the leader's offload flags come from it
(``leader_render``), and the group's member Pod gets

- the directory as a ``hostPath`` of ``type: Directory`` (it must exist, owned by the image's user;
  the operator never creates it), mounted at the same path;
- ``MOONCAKE_OFFLOAD_*``: enabled, storage path, the operator's bucket (bytes and keys), total size
  and bucket max total from ``capacity``, total keys from ``keyLimit``, and the eviction switch,
  policy (the store's lowercase spelling: anything else silently means "never evict") and the
  watermark ratios (percentages of ``capacity`` as fractions);
- an ``sh -c`` init container surveying the directory before the member starts, its verdict in the
  container's termination message (read back for ``TierWasEmpty``; it never fails the Pod);
- a ``preStop`` hook that deregisters the tier at the member's own REST endpoint, which then holds
  for ``scaleIn.gracePeriodSeconds`` (0..3600, the endpoint's own bound), and a Pod grace of that
  plus 60 s.

``cleanAfterDelete`` runs one cleanup Pod per node the group selects when the backend is deleted
(:func:`cleanup_pod`): it empties the directory, never removes it.  Pure.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import backend_render as br
from controllers.kvcache.figures import to_bytes

# The survey: $1 is the tier as mounted in the init container, $2 the termination-message file.  A
# directory it cannot list is reported as such (and is no answer), never as empty, and the member
# still starts: the survey reports, it blocks nothing.
SURVEY_SCRIPT = (
    'if listing=$(ls -A -- "$1" 2>&1); then '
    'if [ -z "$listing" ]; then n=0; else n=$(printf "%s\\n" "$listing" | wc -l); fi; '
    'printf "entries=%d\\n" "$((n))" > "$2"; '
    'else printf "unreadable: %s\\n" "$listing" > "$2"; fi'
)
# The cleanup: $1 is the tier as mounted in the cleanup Pod.  Every entry goes, dot files included;
# the directory itself stays (its owner and any filesystem mounted there are the administrator's).
# A pattern matching nothing stays literal and ``rm -f`` ignores it.
CLEAN_SCRIPT = 'cd -- "$1" && rm -rf -- ./* ./.[!.]* ./..?*'
# The preStop hook, in the member image's Python (its member program is Python): one POST to the
# member's own deregistration, which answers after holding for the grace.
PRESTOP_SCRIPT = (
    "import json, sys, urllib.request as u; port, grace = int(sys.argv[1]), int(sys.argv[2]); "
    "request = u.Request(f'http://127.0.0.1:{port}" + kv.TIER_UNMOUNT_PATH + "', "
    "data=json.dumps({'grace_period_seconds': grace}).encode(), "
    "headers={'Content-Type': 'application/json'}, method='POST'); "
    "u.urlopen(request, timeout=grace + 30).read()"
)
TERMINATION_MESSAGE = "/dev/termination-log"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def tier_of(group: Obj) -> Obj | None:
    """The group's tier (``localDisks`` holds at most one entry), or ``None``."""
    disks = [d for d in _list(group.get("localDisks")) if isinstance(d, dict)]
    return disks[0] if disks else None


def tier_group(backend: Obj) -> tuple[int, Obj, Obj] | None:
    """``(index, group, tier)`` of the one group carrying a tier (rule B10), or ``None``."""
    for index, group in enumerate(_list((br.managed(backend) or {}).get("members"))):
        tier = tier_of(_dict(group))
        if tier is not None:
            return index, _dict(group), tier
    return None


def grace_seconds(backend: Obj) -> int:
    value = _dict(_dict(br.managed(backend)).get("scaleIn")).get("gracePeriodSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _ratio(percent: int) -> str:
    return str(Decimal(percent) / Decimal(100))


def tier_env(tier: Obj) -> list[Obj]:
    """The member's ``MOONCAKE_OFFLOAD_*`` variables for ``tier``."""
    env = [
        (kv.ENV_OFFLOAD_ENABLED, "true"),
        (kv.ENV_OFFLOAD_PATH, str(tier.get("path") or "")),
        (kv.ENV_OFFLOAD_BUCKET_BYTES, str(kv.TIER_BUCKET_BYTES)),
        (kv.ENV_OFFLOAD_BUCKET_KEYS, str(kv.TIER_BUCKET_KEYS)),
    ]
    capacity = to_bytes(tier.get("capacity")) if tier.get("capacity") is not None else None
    if capacity is not None:
        env += [(kv.ENV_OFFLOAD_TOTAL_BYTES, str(capacity)), (kv.ENV_OFFLOAD_BUCKET_MAX_TOTAL, str(capacity))]
    limit = tier.get("keyLimit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        env.append((kv.ENV_OFFLOAD_TOTAL_KEYS, str(limit)))
    eviction = tier.get("eviction")
    if isinstance(eviction, dict):
        enabled = eviction.get("enabled") is not False
        env.append((kv.ENV_OFFLOAD_EVICTION, "true" if enabled else "false"))
        policy = kv.EVICTION_POLICY.get(str(eviction.get("policy") or ""))
        if enabled and policy:
            env.append((kv.ENV_OFFLOAD_EVICTION_POLICY, policy))
        watermark = _dict(eviction.get("watermark"))
        high, low = watermark.get("high"), watermark.get("low")
        if enabled and isinstance(high, int) and isinstance(low, int):
            env += [
                (kv.ENV_OFFLOAD_WATERMARK, "true"),
                (kv.ENV_OFFLOAD_HIGH, _ratio(high)),
                (kv.ENV_OFFLOAD_LOW, _ratio(low)),
            ]
    return [{"name": name, "value": value} for name, value in env]


def tier_volume(tier: Obj) -> Obj:
    return {"name": kv.TIER_VOLUME, "hostPath": {"path": str(tier.get("path") or ""), "type": "Directory"}}


def tier_mount(tier: Obj) -> Obj:
    return {"name": kv.TIER_VOLUME, "mountPath": str(tier.get("path") or "")}


def survey_container(image: str, pull_policy: str) -> Obj:
    """The init container surveying the tier before the member starts (``TierWasEmpty``)."""
    return {
        "name": kv.TIER_SURVEY_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": [
            "sh",
            "-c",
            SURVEY_SCRIPT,
            kv.TIER_SURVEY_CONTAINER,
            kv.TIER_SURVEY_MOUNT,
            TERMINATION_MESSAGE,
        ],
        "terminationMessagePath": TERMINATION_MESSAGE,
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": kv.TIER_VOLUME, "mountPath": kv.TIER_SURVEY_MOUNT, "readOnly": True}],
    }


def prestop_hook(port: int, grace: int) -> Obj:
    """Deregister the tier with the leader, then hold for ``grace`` seconds (the endpoint does both)."""
    return {"exec": {"command": ["python3", "-c", PRESTOP_SCRIPT, str(port), str(grace)]}}


def apply_tier(backend: Obj, index: int, group: Obj, image: str, pull_policy: str, spec: Obj) -> None:
    """Add the tier of ``group`` (member group ``index``) to its member Pod ``spec`` in place."""
    tier = tier_of(group)
    if tier is None:
        return
    container = spec["containers"][0]
    container["env"] = [*container.get("env", []), *tier_env(tier)]
    container["volumeMounts"] = [*container.get("volumeMounts", []), tier_mount(tier)]
    grace = grace_seconds(backend)
    container["lifecycle"] = {"preStop": prestop_hook(kv.MEMBER_HTTP_PORT_BASE + index, grace)}
    spec["initContainers"] = [survey_container(image, pull_policy)]
    spec["volumes"] = [*spec.get("volumes", []), tier_volume(tier)]
    spec["terminationGracePeriodSeconds"] = grace + kv.TIER_GRACE_SLACK_S


def cleanup_pod_name(backend_name: str, node: str) -> str:
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{backend_name}-tier-clean-{digest}"


def cleanup_pod(backend: Obj, namespace: str, node: str, tier: Obj, image: str) -> Obj:
    """The Pod emptying ``tier`` on ``node`` (bound there, tolerating every taint, as root: removing
    content needs no particular uid, whatever the member image runs as)."""
    name = br.name_of(backend)
    pod_labels = br.labels(name, kv.ROLE_TIER_CLEAN)
    spec: Obj = {
        "nodeName": node,
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 10,
        "containers": [
            {
                "name": "clean",
                "image": image,
                "imagePullPolicy": br.pull_policy(backend, image),
                "command": ["sh", "-c", CLEAN_SCRIPT, "tier-clean", kv.TIER_CLEAN_MOUNT],
                "securityContext": {"runAsUser": 0},
                "volumeMounts": [{"name": kv.TIER_VOLUME, "mountPath": kv.TIER_CLEAN_MOUNT}],
            }
        ],
        "volumes": [tier_volume(tier)],
    }
    secrets = br.pull_secrets(backend)
    if secrets:
        spec["imagePullSecrets"] = secrets
    meta = br.meta(cleanup_pod_name(name, node), namespace, name, pod_labels)
    meta["annotations"][kv.ANNOTATION_NODE] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def ledger_config_map(backend: Obj, namespace: str, name: str, key: str, text: str) -> Obj:
    """A ConfigMap the backend reconciler keeps a ledger in (the tier survey, the cleanup)."""
    backend_name = br.name_of(backend)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": br.meta(name, namespace, backend_name, br.labels(backend_name, kv.ROLE_TIER_LEDGER)),
        "data": {key: text},
    }
