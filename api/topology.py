"""The TopologySource vocabulary (topology spec B.1–B.4): arms, conditions and reasons, the snapshot
document, which label keys a writing source may publish, and the Topograph tier keys.

Pure grammar shared by the webhook (``webhooks.topology_source``) and the controllers
(``controllers.topology``).
"""

from __future__ import annotations

import re

from api import constants
from api.naming import is_dns_subdomain, is_qualified_name

MAX_LEVELS = 16
KIND_NODE_LABELS, KIND_CONFIG_MAP, KIND_WEBHOOK = "NodeLabels", "ConfigMap", "Webhook"
ARMS = {"nodeLabels": KIND_NODE_LABELS, "configMap": KIND_CONFIG_MAP, "webhook": KIND_WEBHOOK}

# The snapshot document a ConfigMap key holds or a webhook answers (B.3).
SNAPSHOT_API_VERSION = "topology.gpustack.ai/v1alpha1"
MAX_SNAPSHOT_BYTES = 1024 * 1024
CONFIG_MAP_CA_KEY = "ca.crt"
SECRET_TOKEN_KEY = "token"
SECRET_CERT_KEY, SECRET_KEY_KEY = "tls.crt", "tls.key"

# Conditions of a TopologySource (status.conditions) and their reasons (ours to define, B.1).
CONDITION_READY = constants.CONDITION_READY
CONDITION_VALID = "Valid"
CONDITION_OWNERSHIP_CONFLICT = "OwnershipConflict"
REASON_APPLIED = "Applied"  # Ready: the hierarchy (or the snapshot) is in force
REASON_SERVING_LAST_VALID = "ServingLastValid"  # Ready: a read failed, the last valid set is kept
REASON_EXPIRED = "Expired"  # Ready=False: nothing valid newer than maxStaleness
REASON_INVALID = "Invalid"  # Ready=False, Valid=False: the inventory breaks a rule
REASON_NO_VALID_SNAPSHOT = "NoValidSnapshot"  # Ready=False: nothing valid was ever read
REASON_CONFLICT = "Conflict"  # Ready=False / OwnershipConflict=True
REASON_VALID = "Valid"
REASON_READ_FAILED = "ReadFailed"  # Valid=Unknown: the inventory could not be read
REASON_NO_CONFLICT = "NoConflict"
REASON_READ_ONLY = "ReadOnly"  # OwnershipConflict=False on the nodeLabels arm: it writes nothing

# Node labels: the hierarchy keys no writing source may touch, and the ones it may only echo.
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
STANDARD_PARENTS = (LABEL_REGION, LABEL_ZONE)
WRITABLE_PREFIX = "topology.gpustack.ai/"
TOPOGRAPH_TIER = re.compile(r"^fabric\.topograph\.run/tier-([0-9]+)$")


def arms_of(spec: dict) -> list[str]:
    """The arms ``spec`` sets (``nodeLabels``, ``configMap``, ``webhook``), in that order."""
    return [arm for arm in ARMS if spec.get(arm) is not None]


def source_kind(spec: dict) -> str:
    arms = arms_of(spec)
    return ARMS[arms[0]] if len(arms) == 1 else ""


def reserved_prefix(domain: str) -> str | None:
    """The reserved domain ``domain`` equals or lies under, if any (B.2 rule 6)."""
    for reserved in constants.TOPOLOGY_RESERVED_PREFIXES:
        if domain == reserved or domain.endswith("." + reserved):
            return reserved
    return None


def write_prefix_problem(prefix: str) -> tuple[str, str] | None:
    """Why ``additionalWritePrefix`` is refused: ``("invalid"|"forbidden", message)``, or None."""
    domain, slash, rest = prefix.partition("/")
    if not slash or rest or not is_dns_subdomain(domain):
        return (
            "invalid",
            "must be one DNS-1123 subdomain followed by a single trailing '/' (e.g. topology.example.com/)",
        )
    reserved = reserved_prefix(domain)
    if reserved is not None:
        return (
            "forbidden",
            f"{reserved} is reserved (Kubernetes, GPUStack and Topograph own their prefixes); "
            "delegate a DNS prefix your organisation owns",
        )
    return None


def writable(key: str, additional_prefix: str = "") -> bool:
    """A key a writing source may publish: ``topology.gpustack.ai/*`` except the profile, or a
    key under the source's ``additionalWritePrefix``."""
    if not is_qualified_name(key):
        return False
    if key.startswith(WRITABLE_PREFIX):
        return key != constants.LABEL_TOPOLOGY_PROFILE
    return bool(additional_prefix) and key.startswith(additional_prefix)


def normalized_levels(levels: list[str]) -> list[str]:
    """``levels`` with every contiguous run of Topograph ``fabric.topograph.run/tier-N`` keys put
    coarsest first (the highest tier number is the coarsest), the rest untouched (B.4 step 2)."""
    out: list[str] = []
    run: list[tuple[int, str]] = []
    for key in [*levels, ""]:
        match = TOPOGRAPH_TIER.match(key)
        if match:
            run.append((int(match.group(1)), key))
            continue
        out.extend(k for _, k in sorted(run, key=lambda t: -t[0]))
        run = []
        if key:
            out.append(key)
    return out
