"""The Settings registry: every online-adjustable ``Setting`` (``gpustack.ai/v1``), once.

A setting lives in the system namespace (stored in Secret ``gpustack-settings``), is seeded once from
``GPUSTACK_<UPPER_SNAKE_NAME>`` or its default, and is never overwritten by a later seed. Each entry
here carries its default, its validator (a pure function returning an error message or None), its
seed variable and who reads it. The table is the union of the operations appendix, the kv-cache
spec (§7) and the model-delivery spec (§6).

- :func:`validate` checks one value; :func:`cross_check` checks values against each other (the two
  model-store watermarks); :func:`validate_update` does both for an edit.
- :func:`seed_value` / :func:`seed_all` compute the first value from the environment and refuse an
  invalid seed, since a seeded value skips admission and the worker must not start on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from api import setting_names
from api.booleans import BOOL_WORDS, parse_bool
from api.engines import (
    SETTING_ENGINE_IMAGE,
    SETTING_KV_CACHE_DTYPE_OWNED,
    SETTING_OVERCOMMIT,
    SETTING_ROUTING_SIDECAR_IMAGE,
)
from api.images import SETTING_CONTAINER_NAMESPACE, SETTING_CONTAINER_REGISTRY

Reader = Literal["worker", "model-manager"]
Validator = Callable[[str], str | None]

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?$"
)
_REGISTRY = re.compile(rf"^{_DOMAIN}(?:/{_COMPONENT})*$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NO_PROXY_ENTRY = re.compile(r"^[A-Za-z0-9*.:_\[\]/-]+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


class SettingError(ValueError):
    """A setting value, or a seed, that its validator refuses."""

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        self.message = message
        super().__init__(f"setting {name}: {message}")


# --- Validators (each returns an error message or None) ---------------------------------------------------


def parse_duration(value: str) -> float:
    """Go's ``time.ParseDuration``, in seconds; raises ValueError on anything else."""
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    if not text or _DURATION_PART.sub("", text):
        raise ValueError(value)
    return sign * sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def is_bool(value: str) -> str | None:
    return None if value in BOOL_WORDS else f'must be a boolean ("true" or "false"), not "{value}"'


def any_value(value: str) -> str | None:
    return None


def one_of(*choices: str) -> Validator:
    def check(value: str) -> str | None:
        return None if value in choices else f'must be one of {", ".join(choices)}, not "{value}"'

    return check


def integer_between(low: int, high: int) -> Validator:
    def check(value: str) -> str | None:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            return f'must be an integer, not "{value}"'
        if not low <= number <= high:
            return f"must be between {low} and {high}, not {number}"
        return None

    return check


def image_reference(*, blank_ok: bool = False) -> Validator:
    def check(value: str) -> str | None:
        if value == "" and blank_ok:
            return None
        if not _IMAGE.fullmatch(value):
            return f'must be a container image reference such as "registry/name:tag", not "{value}"'
        return None

    return check


def registry(value: str) -> str | None:
    if value == "" or _REGISTRY.fullmatch(value):
        return None
    return f'must be blank or a registry host such as "registry.example.com:5000", not "{value}"'


def pull_policy(value: str) -> str | None:
    return one_of("Always", "IfNotPresent", "Never")(value)


def http_url(value: str) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f'must be an absolute http or https URL, not "{value}"'
    return None


def proxy_url(value: str) -> str | None:
    if value == "":
        return None
    problem = http_url(value)
    if problem:
        return problem
    if urlsplit(value).username is not None or "@" in urlsplit(value).netloc:
        return "must not carry credentials: a proxy URL is stored and rendered in clear text"
    return None


def host_list(value: str) -> str | None:
    if value == "":
        return None
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or not _NO_PROXY_ENTRY.fullmatch(entry):
            return (
                f'must be a comma-separated list of hosts, domains, IPs or CIDRs; "{entry}" is none of them'
            )
    return None


def config_map_name(value: str) -> str | None:
    if value == "" or (len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value)):
        return None
    return f'must be blank or the name of a ConfigMap in the operator namespace, not "{value}"'


def duration_at_least(minimum_seconds: float, spelled: str) -> Validator:
    def check(value: str) -> str | None:
        try:
            seconds = parse_duration(value)
        except ValueError:
            return f'must be a duration such as "24h" or "90m", not "{value}"'
        if seconds < minimum_seconds:
            return f"must be at least {spelled}, not {value}"
        return None

    return check


def bandwidth(value: str) -> str | None:
    if not _QUANTITY.fullmatch(value):
        return f'must be a quantity of bytes per second such as "200Mi" (0 is unlimited), not "{value}"'
    if value.startswith("-") and value.strip("-+0.") != "":
        return f"must not be negative, not {value}"
    return None


# --- The registry ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingDefinition:
    """One setting: its default, its check, who reads it and what it does."""

    name: str
    default: str
    validator: Validator
    readers: tuple[Reader, ...]
    effect: str
    editable: bool = True
    sensitive: bool = False

    @property
    def env(self) -> str:
        return env_name(self.name)


def env_name(name: str) -> str:
    """``instance-privileged-allowed`` -> ``GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED``."""
    return "GPUSTACK_" + name.upper().replace("-", "_")


W: tuple[Reader, ...] = ("worker",)
MM: tuple[Reader, ...] = ("model-manager",)
BOTH: tuple[Reader, ...] = ("worker", "model-manager")

_DEFINITIONS: tuple[SettingDefinition, ...] = (
    SettingDefinition(
        SETTING_CONTAINER_REGISTRY,
        "",
        registry,
        W,
        "image prefix for built-in applications and every image a Setting names (sshd, router, warm-up, KV)",
    ),
    SettingDefinition(
        SETTING_CONTAINER_NAMESPACE, "", any_value, W, "replaces the first path segment of the same images"
    ),
    SettingDefinition(
        setting_names.IMAGE_PULL_SECRETS,
        "",
        any_value,
        W,
        "built-in applications only, not rendered workloads",
    ),
    SettingDefinition(
        setting_names.IMAGE_PULL_POLICY, "IfNotPresent", pull_policy, W, "built-in applications"
    ),
    SettingDefinition(SETTING_OVERCOMMIT, "true", is_bool, W, "Instance sizing and requests"),
    SettingDefinition(
        setting_names.INSTANCE_SSH_SERVER_IMAGE,
        "gpustack/ssh-server:v1.3.0",
        image_reference(),
        W,
        "the Instance sshd sidecar",
    ),
    SettingDefinition(
        setting_names.KV_CACHE_BACKEND_IMAGE,
        "gpustack/mirrored-mooncake:0.3.13.post1-cpu",
        image_reference(blank_ok=True),
        W,
        "image of backends naming none; blank restores the create-time refusal",
    ),
    SettingDefinition(
        SETTING_ENGINE_IMAGE,
        "",
        image_reference(blank_ok=True),
        W,
        "replaces every managed role's engine image (a stand-in engine on a test cluster); blank is §8's",
    ),
    SettingDefinition(
        SETTING_KV_CACHE_DTYPE_OWNED,
        "true",
        is_bool,
        W,
        "render and own --kv-cache-dtype; refuse new auto Bindings; a flip recreates replicas",
    ),
    SettingDefinition(
        setting_names.MODEL_DEPLOYMENT_ROUTER_IMAGE,
        "gpustack/llm-router:v0.1.0",
        image_reference(),
        W,
        "the managed router",
    ),
    SettingDefinition(
        setting_names.MODEL_DEPLOYMENT_ROUTER_PROXY_IMAGE,
        "gpustack/mirrored-envoy:distroless-v1.33.2",
        image_reference(),
        W,
        "the router proxy",
    ),
    SettingDefinition(
        SETTING_ROUTING_SIDECAR_IMAGE,
        "gpustack/mirrored-llm-d-router-disagg-sidecar:v0.10.0",
        image_reference(),
        W,
        "the direct decoder's routing sidecar",
    ),
    SettingDefinition(
        setting_names.MODEL_DEPLOYMENT_TCP_TW_REUSE, "false", is_bool, W, "sysctl on SGLang prefill Pods"
    ),
    SettingDefinition(
        setting_names.MODEL_PREFETCH_WARMUP_IMAGE,
        "gpustack/mirrored-python:3.12-alpine",
        image_reference(),
        W,
        "the prefetch warm-up Pod",
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT,
        "https://huggingface.co",
        http_url,
        BOTH,
        "resolution, plugin, HF_ENDPOINT",
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_MODELSCOPE_ENDPOINT,
        "https://www.modelscope.cn",
        http_url,
        BOTH,
        "resolution, plugin, MODELSCOPE_DOMAIN",
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_HTTPS_PROXY, "", proxy_url, BOTH, "resolution, plugin, HTTPS_PROXY"
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_NO_PROXY, "", host_list, BOTH, "resolution, plugin, NO_PROXY"
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_CA_BUNDLE,
        "",
        config_map_name,
        BOTH,
        "a ConfigMap (key ca.crt) trusted for the hub; never engines",
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_REVALIDATE_INTERVAL,
        "24h",
        duration_at_least(60, "1m"),
        W,
        "how often access is revalidated",
    ),
    SettingDefinition(
        setting_names.MODEL_ARTIFACT_DELIVERY_MODE,
        "Engine",
        one_of("Engine", "Node"),
        W,
        "how hub weights reach deployments; Node needs the CSIDriver; a change rolls hub deployments once",
    ),
    SettingDefinition(
        setting_names.MODEL_STORE_HIGH_WATERMARK,
        "80",
        integer_between(2, 95),
        MM,
        "collection starts above it",
    ),
    SettingDefinition(
        setting_names.MODEL_STORE_LOW_WATERMARK, "70", integer_between(1, 94), MM, "collection stops below it"
    ),
    SettingDefinition(
        setting_names.MODEL_STORE_DOWNLOAD_CONCURRENCY, "8", integer_between(1, 64), MM, "requests per node"
    ),
    SettingDefinition(
        setting_names.MODEL_STORE_PEER_SYNC, "true", is_bool, MM, "download from peer nodes first"
    ),
    SettingDefinition(
        setting_names.MODEL_STORE_DOWNLOAD_BANDWIDTH,
        "0",
        bandwidth,
        MM,
        "bytes per second per node; 0 unlimited",
    ),
    SettingDefinition(
        setting_names.INSTANCE_ACCESS_STATIC_ADDRESS, "", any_value, W, "Instance status.accessAddresses"
    ),
    SettingDefinition(
        setting_names.INSTANCE_ACCESS_WILDCARD_DNS, "", any_value, W, "<host-ip>.<dns> when no static address"
    ),
    SettingDefinition(
        setting_names.INSTANCE_PRIVILEGED_ALLOWED, "false", is_bool, W, "Instances may run privileged"
    ),
    SettingDefinition(
        setting_names.INSTANCE_HOST_PATH_VOLUME_ALLOWED, "false", is_bool, W, "Instances may mount host paths"
    ),
    SettingDefinition(
        setting_names.MODEL_DEPLOYMENT_PRIVILEGED_ALLOWED,
        "false",
        is_bool,
        W,
        "ModelDeployment roles may run privileged",
    ),
    SettingDefinition(
        setting_names.MODEL_DEPLOYMENT_HOST_PATH_VOLUME_ALLOWED,
        "false",
        is_bool,
        W,
        "ModelDeployment roles may mount host paths",
    ),
    SettingDefinition(
        setting_names.INSTANCE_PERSISTENT_VOLUME_PLACEMENT,
        "true",
        is_bool,
        W,
        "claim node affinity at Pod creation",
    ),
    SettingDefinition(setting_names.WORKLOAD_FIT_AFFINITY, "true", is_bool, W, "the Workload fit pin"),
    SettingDefinition(
        setting_names.NODE_MANAGEMENT_MANUAL,
        "false",
        is_bool,
        W,
        "no automatic gpustack.ai/managed=true label",
    ),
    SettingDefinition(
        setting_names.INSTANCE_TYPE_MIXED_ON_NODE,
        "true",
        is_bool,
        W,
        "accelerated nodes also yield CPU types",
    ),
    SettingDefinition(
        setting_names.INSTANCE_TYPE_DERIVED_FROM_NODE,
        "true",
        is_bool,
        W,
        "author InstanceTypes; attach gpustack-node-devices",
    ),
    SettingDefinition(
        setting_names.INSTANCE_TYPE_DRAIN_WHEN_NO_FLAVORS,
        "true",
        is_bool,
        W,
        "HoldAndDrain before emptying a queue",
    ),
    SettingDefinition(
        setting_names.INSTANCE_TYPE_AWARE_CPU_MANUFACTURER, "false", is_bool, W, "split pools by CPU key"
    ),
    SettingDefinition(
        setting_names.TOPOLOGY_PROFILE_CHANGE_STOP_POLICY,
        "HoldAndDrain",
        one_of("HoldAndDrain", "Hold"),
        W,
        "how a live profile change stops a queue whose dropped flavor is reserved: HoldAndDrain evicts "
        "its workloads first; Hold admits nothing new, keeps admitted workloads running until they "
        "end, and swaps once none reserves a dropped flavor",
    ),
)

SETTINGS: dict[str, SettingDefinition] = {d.name: d for d in _DEFINITIONS}
"""Every setting by name."""

WATERMARK_HIGH = setting_names.MODEL_STORE_HIGH_WATERMARK
WATERMARK_LOW = setting_names.MODEL_STORE_LOW_WATERMARK
DELIVERY_MODE = setting_names.MODEL_ARTIFACT_DELIVERY_MODE


def definition(name: str) -> SettingDefinition:
    try:
        return SETTINGS[name]
    except KeyError:
        raise SettingError(name, "no such setting") from None


def validate(name: str, value: str, *, csi_driver_present: bool | None = None) -> str | None:
    """The refusal of ``value`` for setting ``name``, or None.

    ``csi_driver_present`` is the one fact a value check needs from the cluster: ``Node`` delivery is
    refused while the CSIDriver ``model.csi.gpustack.ai`` does not exist (None: not known, not judged).
    """
    problem = definition(name).validator(value)
    if problem is None and name == DELIVERY_MODE and value == "Node" and csi_driver_present is False:
        problem = (
            "Node needs the CSIDriver model.csi.gpustack.ai, which does not exist: enable modelManager first"
        )
    return problem


def cross_check(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """Refusals between settings: the high watermark must stay above the low one."""
    high = _int_or_none(values.get(WATERMARK_HIGH, SETTINGS[WATERMARK_HIGH].default))
    low = _int_or_none(values.get(WATERMARK_LOW, SETTINGS[WATERMARK_LOW].default))
    if high is not None and low is not None and not low < high:
        return [
            (WATERMARK_HIGH, f"must be above {WATERMARK_LOW} ({low}), not {high}"),
            (WATERMARK_LOW, f"must be below {WATERMARK_HIGH} ({high}), not {low}"),
        ]
    return []


def validate_update(
    name: str, value: str, current: Mapping[str, str], *, csi_driver_present: bool | None = None
) -> str | None:
    """The refusal of setting ``name`` to ``value`` given the other current values, or None."""
    problem = validate(name, value, csi_driver_present=csi_driver_present)
    if problem:
        return problem
    for offender, message in cross_check({**current, name: value}):
        if offender == name:
            return message
    return None


def seed_value(name: str, env: Mapping[str, str]) -> str:
    """The first value of a setting: ``GPUSTACK_<NAME>`` when set, else the default. Refuses an invalid seed."""
    spec = definition(name)
    value = env.get(spec.env, spec.default)
    problem = validate(name, value)
    if problem:
        raise SettingError(name, f"{spec.env}={value!r} {problem}")
    return value


def seed_all(env: Mapping[str, str]) -> dict[str, str]:
    """Every setting's seed; raises :class:`SettingError` on the first invalid seed or crossing."""
    values = {name: seed_value(name, env) for name in SETTINGS}
    crossed = cross_check(values)
    if crossed:
        raise SettingError(*crossed[0])
    return values


def as_bool(value: str) -> bool:
    """A boolean setting's value."""
    return parse_bool(value)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(str(value).strip(), 10)
    except ValueError:
        return None
