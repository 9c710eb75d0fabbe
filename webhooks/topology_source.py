"""``TopologySource`` admission (topology spec B.2): eleven rules, identical on CREATE and UPDATE.

:func:`errors` is pure over the object; the shape check before every handler has already refused
wrong-typed fields, so every value read here has the type its schema declares (or is absent).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from api import constants, selectors
from api import topology as topo
from api.naming import is_dns_subdomain, is_qualified_name
from api.settings import parse_duration
from webhooks.decision import (
    Decision,
    FieldError,
    allow,
    duplicate,
    forbidden,
    invalid,
    reject,
    required,
    too_many,
)
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

KIND = "TopologySource"
WORKER_NAMESPACE = constants.SYSTEM_NAMESPACE


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _levels(spec: dict[str, Any]) -> list[FieldError]:
    """Rules 1-4: 1 to 16 qualified label keys, no hostname, none twice."""
    levels = spec.get("levels")
    path = "spec.levels"
    if not levels:
        return [
            required(
                path,
                "list the hierarchy's label keys, coarsest first (e.g. topology.kubernetes.io/zone); "
                "kubernetes.io/hostname is implied",
            )
        ]
    out: list[FieldError] = []
    if len(levels) > topo.MAX_LEVELS:
        out.append(too_many(path, len(levels), topo.MAX_LEVELS))
    seen: dict[str, int] = {}
    for index, level in enumerate(levels):
        at = f"{path}[{index}]"
        if level == constants.LABEL_HOSTNAME:
            out.append(
                forbidden(
                    at,
                    "kubernetes.io/hostname is always the last level and is added implicitly; remove it",
                )
            )
        elif not is_qualified_name(level):
            out.append(
                invalid(
                    at,
                    level,
                    "must be a label key: an optional DNS-subdomain prefix and '/', then a name of at most "
                    "63 alphanumerics, '-', '_' or '.' (e.g. topology.gpustack.ai/rack)",
                )
            )
        if level in seen:
            out.append(
                duplicate(at, level, f"already spec.levels[{seen[level]}]; a label is one tier, name it once")
            )
        else:
            seen[level] = index
    return out


def _selector(spec: dict[str, Any]) -> list[FieldError]:
    return [
        invalid(f"spec.nodeSelector.{where}" if where else "spec.nodeSelector", spec.get("nodeSelector"), why)
        for where, why in selectors.problems(spec.get("nodeSelector"))
    ]


def _reference(ref: Any, path: str) -> list[FieldError]:
    """Rule 8: every reference names an object in the worker namespace."""
    ref = _dict(ref)
    out: list[FieldError] = []
    namespace, name = ref.get("namespace") or "", ref.get("name") or ""
    if namespace != WORKER_NAMESPACE:
        out.append(
            forbidden(
                f"{path}.namespace",
                f"references are read from the worker namespace only; put the object in "
                f"{WORKER_NAMESPACE} and name that namespace",
            )
        )
    if not is_dns_subdomain(name):
        out.append(invalid(f"{path}.name", name, "must name an object (a DNS-1123 subdomain)"))
    return out


def _duration(value: Any, path: str) -> tuple[float | None, list[FieldError]]:
    """Rule 10's first half: a Go duration greater than zero."""
    text = value if isinstance(value, str) else ""
    try:
        seconds = parse_duration(text)
    except ValueError:
        return None, [invalid(path, value, "must be a duration such as 30s, 5m or 1h30m")]
    if seconds <= 0:
        return None, [invalid(path, value, "must be greater than zero")]
    return seconds, []


def _prefix(spec: dict[str, Any]) -> list[FieldError]:
    """Rules 6 and 7: one owned DNS prefix with its trailing slash, never with the read-only arm."""
    prefix = spec.get("additionalWritePrefix")
    if not prefix:
        return []
    path = "spec.additionalWritePrefix"
    if spec.get("nodeLabels") is not None:
        return [
            forbidden(
                path,
                "the nodeLabels arm only reads the Nodes' labels and writes nothing; remove the prefix "
                "or publish the labels through a configMap or webhook source",
            )
        ]
    problem = topo.write_prefix_problem(prefix)
    if problem is None:
        return []
    kind, message = problem
    return [forbidden(path, message) if kind == "forbidden" else invalid(path, prefix, message)]


def _config_map(arm: dict[str, Any]) -> list[FieldError]:
    path = "spec.configMap"
    out = _reference(arm.get("configMapRef"), f"{path}.configMapRef")
    if not str(arm.get("key") or "").strip():
        out.append(required(f"{path}.key", "name the ConfigMap key that holds the snapshot"))
    out += _duration(arm.get("maxStaleness"), f"{path}.maxStaleness")[1]
    return out


def _url(url: Any) -> list[FieldError]:
    """Rule 9: an absolute https URL with a host, no userinfo, no fragment."""
    path = "spec.webhook.url"
    text = url if isinstance(url, str) else ""
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError:
        return [invalid(path, url, "must be an absolute https URL (https://host[:port]/path)")]
    if parts.scheme != "https" or not host:
        return [invalid(path, url, "must be an absolute https URL with a host (https://host[:port]/path)")]
    out: list[FieldError] = []
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        out.append(
            invalid(
                path,
                url,
                "must not carry credentials; reference a bearerTokenSecretRef or "
                "tlsClientCertificateSecretRef instead",
            )
        )
    if parts.fragment or text.endswith("#"):
        out.append(invalid(path, url, "must not carry a fragment ('#...'); remove it"))
    return out


def _webhook(arm: dict[str, Any]) -> list[FieldError]:
    path = "spec.webhook"
    out = _url(arm.get("url"))
    poll, wrong = _duration(arm.get("pollInterval"), f"{path}.pollInterval")
    out += wrong
    timeout, wrong = _duration(arm.get("timeout"), f"{path}.timeout")
    out += wrong
    out += _duration(arm.get("maxStaleness"), f"{path}.maxStaleness")[1]
    if poll is not None and timeout is not None and timeout > poll:
        out.append(
            invalid(
                f"{path}.timeout",
                arm.get("timeout"),
                f"must not exceed pollInterval ({arm.get('pollInterval')}): a request may not outlive its poll",
            )
        )
    if arm.get("caBundleConfigMapRef") is not None:
        out += _reference(arm.get("caBundleConfigMapRef"), f"{path}.caBundleConfigMapRef")
    credentials = [
        k for k in ("bearerTokenSecretRef", "tlsClientCertificateSecretRef") if arm.get(k) is not None
    ]
    if len(credentials) != 1:
        out.append(
            invalid(
                path,
                credentials,
                "set exactly one of bearerTokenSecretRef (key token) or tlsClientCertificateSecretRef "
                "(keys tls.crt and tls.key)",
            )
        )
    for key in credentials:
        out += _reference(arm.get(key), f"{path}.{key}")
    return out


def errors(obj: dict[str, Any]) -> list[FieldError]:
    """Every rule of B.2 that ``obj`` breaks, each with its field path."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec", "a TopologySource needs nodeSelector, levels and one source arm")]
    out = _selector(spec) + _levels(spec)
    arms = topo.arms_of(spec)
    if len(arms) != 1:
        out.append(
            invalid(
                "spec",
                arms,
                "set exactly one source arm: nodeLabels (read the Nodes' labels), configMap or webhook",
            )
        )
    out += _prefix(spec)
    if spec.get("configMap") is not None:
        out += _config_map(_dict(spec.get("configMap")))
    if spec.get("webhook") is not None:
        out += _webhook(_dict(spec.get("webhook")))
    return out


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    found = errors(request.object or {})
    if found:
        return reject(KIND, request.display_name, found)
    return allow()
