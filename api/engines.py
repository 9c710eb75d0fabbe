"""The engine vocabulary as data: owned keys, router-owned flags, degree tables, artifact-owned keys.

One structure feeds every consumer: the renderer drops operator-owned env and never composes a degree,
the ModelDeployment webhook refuses owned keys and reads degrees, the Pod KV-cache injector scans for
the same keys, and ``fastpath.degrees`` compiles its recognition tables from ``GRAMMARS`` at import.

Ownership is per (engine, key): a key one engine owns is a plain user key on the other
(model-deployment.md §3.1).  Nothing here decides by name prefix; the tables are the authority.

Only data and lookups live here.  Recognising a key *as the engine's parser spells it* (``--f=v``,
unique prefixes, vLLM's ``_``/``.`` rewrites, single-dash aliases) is ``fastpath.argv``'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from api import setting_names
from api.constants import RANK_ENV

# --- Engines ---------------------------------------------------------------------------------------
ENGINE_VLLM = "vLLM"
ENGINE_SGLANG = "SGLang"
ENGINES = (ENGINE_VLLM, ENGINE_SGLANG)

# --- Owned keys (model-deployment.md §3.1–3.2) -------------------------------------------------------
KIND_ARG = "arg"
KIND_ENV = "env"

REASON_DUPLICATE = "duplicate"  # two values for one connector argument cannot be told apart
REASON_DESTROY = "destroy"  # a user entry silently replaces the whole operator-rendered configuration
REASON_SECURITY = "security"  # carries the reuse domain; a second path to a value the API refuses
REASON_CONDITIONAL = "conditional"  # owned only under conditions (§3.2)


@dataclass(frozen=True, slots=True)
class OwnedKey:
    """One operator-owned key on one engine."""

    engine: str
    key: str
    kind: str  # KIND_ARG | KIND_ENV
    reason: str  # REASON_*
    why: str  # one clause for refusal messages


_WHY_CONNECTOR = "it carries the connector configuration the operator renders"
_WHY_RANK = "it carries the instance's rank wiring the operator renders above size 1"

KV_CACHE_DTYPE_FLAG = "--kv-cache-dtype"
"""Owned on both engines while ``spec.kvCache`` is set, unless the role takes over its command line or
the Setting ``model-deployment-kv-cache-dtype-owned`` is off (§3.2).  Conditional: callers decide."""

SETTING_KV_CACHE_DTYPE_OWNED = setting_names.MODEL_DEPLOYMENT_KV_CACHE_DTYPE_OWNED
SETTING_ROUTING_SIDECAR_IMAGE = setting_names.MODEL_DEPLOYMENT_ROUTING_SIDECAR_IMAGE
SETTING_ENGINE_IMAGE = setting_names.MODEL_DEPLOYMENT_ENGINE_IMAGE
"""When set, the image of every managed role's engine container (``main``), whatever the role or the
deployment names and whatever the runner formula yields: a stand-in engine on a test cluster, or one
site-wide build. Blank (the default) leaves images as §8 assembles them."""
SETTING_OVERCOMMIT = setting_names.INSTANCE_GENERAL_RESOURCES_OVERCOMMIT


def _rank_rows(engine: str) -> tuple[OwnedKey, ...]:
    return tuple(OwnedKey(engine, name, KIND_ENV, REASON_DUPLICATE, _WHY_RANK) for name in RANK_ENV)


def _dtype_row(engine: str) -> OwnedKey:
    return OwnedKey(
        engine,
        KV_CACHE_DTYPE_FLAG,
        KIND_ARG,
        REASON_CONDITIONAL,
        "the operator renders the KVCachePoolBinding's dtype there",
    )


OWNED_KEYS: tuple[OwnedKey, ...] = (
    # vLLM (one row covers NVIDIA and Ascend; only the connector name differs).
    OwnedKey(ENGINE_VLLM, "--kv-transfer-config", KIND_ARG, REASON_DUPLICATE, _WHY_CONNECTOR),
    OwnedKey(
        ENGINE_VLLM,
        "--kv-events-config",
        KIND_ARG,
        REASON_DUPLICATE,
        "it carries the KV-events publisher configuration the operator renders",
    ),
    OwnedKey(
        ENGINE_VLLM,
        "MOONCAKE_CONFIG_PATH",
        KIND_ENV,
        REASON_DESTROY,
        "it re-points the whole Mooncake client configuration away from the operator-rendered file",
    ),
    OwnedKey(ENGINE_VLLM, "VLLM_MOONCAKE_BOOTSTRAP_PORT", KIND_ENV, REASON_DUPLICATE, _WHY_CONNECTOR),
    *_rank_rows(ENGINE_VLLM),
    _dtype_row(ENGINE_VLLM),
    # SGLang.
    OwnedKey(ENGINE_SGLANG, "--hicache-storage-backend", KIND_ARG, REASON_DUPLICATE, _WHY_CONNECTOR),
    OwnedKey(
        ENGINE_SGLANG,
        "--hicache-storage-backend-extra-config",
        KIND_ARG,
        REASON_DESTROY,
        "it selects a loader that falls back to built-in defaults (a 4 GiB segment, a localhost "
        "identity) and silently replaces the operator-rendered configuration; the operator never sets it",
    ),
    OwnedKey(
        ENGINE_SGLANG,
        "--disaggregation-mode",
        KIND_ARG,
        REASON_DUPLICATE,
        "the prefill and decode halves must agree on it",
    ),
    OwnedKey(
        ENGINE_SGLANG,
        "--disaggregation-transfer-backend",
        KIND_ARG,
        REASON_DUPLICATE,
        "the prefill and decode halves must agree on it",
    ),
    OwnedKey(
        ENGINE_SGLANG,
        "--disaggregation-bootstrap-port",
        KIND_ARG,
        REASON_DUPLICATE,
        "the prefill and decode halves must agree on it",
    ),
    OwnedKey(
        ENGINE_SGLANG,
        "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH",
        KIND_ENV,
        REASON_DESTROY,
        "it selects a loader that falls back to built-in defaults and silently replaces the "
        "operator-rendered configuration; the operator never sets it",
    ),
    *(
        OwnedKey(ENGINE_SGLANG, name, KIND_ENV, REASON_DUPLICATE, _WHY_CONNECTOR)
        for name in (
            "MOONCAKE_MASTER",
            "MOONCAKE_TE_META_DATA_SERVER",
            "MOONCAKE_PROTOCOL",
            "MOONCAKE_DEVICE",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE",
            "MOONCAKE_LOCAL_HOSTNAME",
        )
    ),
    OwnedKey(
        ENGINE_SGLANG,
        "MOONCAKE_TENANT_ID",
        KIND_ENV,
        REASON_SECURITY,
        "it carries the reuse domain, which only the KVCachePoolBinding may name",
    ),
    *_rank_rows(ENGINE_SGLANG),
    _dtype_row(ENGINE_SGLANG),
)

_OWNED_BY_KEY: Mapping[tuple[str, str], OwnedKey] = MappingProxyType(
    {(row.engine, row.key): row for row in OWNED_KEYS}
)


def owned_key(engine: str, key: str) -> OwnedKey | None:
    """The row owning ``key`` on ``engine`` (exact key; spellings are resolved by fastpath.argv)."""
    return _OWNED_BY_KEY.get((engine, key))


def owned_args(engine: str, *, kv_cache_dtype_owned: bool = False) -> frozenset[str]:
    """The canonical owned flags of ``engine``; ``--kv-cache-dtype`` only when the caller says it is
    owned for this role (kvCache set, no take-over command, Setting on)."""
    args = _OWNED_ARGS.get(engine, frozenset())
    return args | _DTYPE_ONLY if kv_cache_dtype_owned else args


def owned_env(engine: str) -> frozenset[str]:
    """The owned environment variables of ``engine`` (rank variables included, at every size).

    The renderer drops exactly these from a role's env and the webhook refuses exactly these."""
    return _OWNED_ENV.get(engine, frozenset())


_DTYPE_ONLY = frozenset({KV_CACHE_DTYPE_FLAG})
_OWNED_ARGS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        engine: frozenset(
            r.key
            for r in OWNED_KEYS
            if r.engine == engine and r.kind == KIND_ARG and r.reason != REASON_CONDITIONAL
        )
        for engine in ENGINES
    }
)
_OWNED_ENV: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        engine: frozenset(r.key for r in OWNED_KEYS if r.engine == engine and r.kind == KIND_ENV)
        for engine in ENGINES
    }
)

# --- Router-owned router.extraArgs (§3.3): matched by name (--f or --f=v) only ---------------------
ROUTER_LLM_D = "llm-d-router"
ROUTER_VLLM = "vllm-router"
ROUTER_SGLANG_GATEWAY = "sglang-gateway"
ROUTERS = (ROUTER_LLM_D, ROUTER_VLLM, ROUTER_SGLANG_GATEWAY)

_VLLM_ROUTER_OWNED = (
    "--host",
    "--port",
    "--prometheus-host",
    "--prometheus-port",
    "--kv-connector",
    "--service-discovery",
    "--service-discovery-namespace",
    "--service-discovery-port",
    "--selector",
    "--prefill-selector",
    "--decode-selector",
    "--vllm-pd-disaggregation",
)

ROUTER_OWNED_ARGS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        ROUTER_LLM_D: frozenset(
            {
                "--endpoint-selector",
                "--endpoint-target-ports",
                "--config-file",
                "--secure-serving",
                "--grpc-health-port",
                "--metrics-endpoint-auth",
            }
        ),
        ROUTER_VLLM: frozenset(_VLLM_ROUTER_OWNED),
        ROUTER_SGLANG_GATEWAY: frozenset(
            ("--pd-disaggregation" if flag == "--vllm-pd-disaggregation" else flag)
            for flag in _VLLM_ROUTER_OWNED
            if flag != "--kv-connector"
        ),
    }
)


def router_owned_flag(router: str, token: str) -> str | None:
    """The router-owned flag ``token`` names (``--f`` or ``--f=v``, exact name only), else None."""
    name = token.partition("=")[0]
    return name if name in ROUTER_OWNED_ARGS.get(router, frozenset()) else None


# --- Degree / mode / wiring tables (§4.3) ------------------------------------------------------------
FLAG_DEGREE = "degree"  # an integer parallelism degree (errors when unreadable)
FLAG_MODE = "mode"  # a switch; consumes no token
FLAG_WIRING = "wiring"  # multi-node / rank wiring; its presence silences the width check
FLAG_OTHER = "other"  # another engine option, listed only so that abbreviations resolve as the engine's


@dataclass(frozen=True, slots=True)
class EngineFlag:
    """One flag of an engine's parallelism grammar."""

    canonical: str
    aliases: tuple[str, ...]
    kind: str  # FLAG_*
    field: str | None = None  # the Degrees attribute a degree fills
    minimum: int = 1  # a degree's lowest accepted value
    relayed: bool = False  # copied into transfer documents (vLLM-Ascend tp/dp blocks)

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.canonical, *self.aliases)


@dataclass(frozen=True, slots=True)
class EngineGrammar:
    """How one engine's parser reads its command line, as far as the operator needs it."""

    engine: str
    rewrites_names: bool  # vLLM: '_'→'-' before the first '.', drop from the first '.' (long flags)
    flags: tuple[EngineFlag, ...]
    degree_env: str | None = None  # an env var that is a fallback for the DP degree
    degree_env_field: str | None = None

    def flag(self, canonical: str) -> EngineFlag | None:
        for entry in self.flags:
            if entry.canonical == canonical:
                return entry
        return None


def _wiring(canonical: str, *aliases: str) -> EngineFlag:
    return EngineFlag(canonical, aliases, FLAG_WIRING)


VLLM_GRAMMAR = EngineGrammar(
    engine=ENGINE_VLLM,
    rewrites_names=True,
    flags=(
        EngineFlag("--tensor-parallel-size", ("-tp",), FLAG_DEGREE, "tp", relayed=True),
        EngineFlag("--pipeline-parallel-size", ("-pp",), FLAG_DEGREE, "pp"),
        EngineFlag("--data-parallel-size", ("-dp",), FLAG_DEGREE, "dp", relayed=True),
        # Declared 0 means "unset": the width then counts --data-parallel-size instead.
        EngineFlag("--data-parallel-size-local", ("-dpl",), FLAG_DEGREE, "dpl", minimum=0),
        EngineFlag("--prefill-context-parallel-size", ("-pcp",), FLAG_DEGREE, "pcp"),
        # Reuses the tensor-parallel ranks: no width factor.
        EngineFlag("--decode-context-parallel-size", ("-dcp",), FLAG_DEGREE, "dcp"),
        EngineFlag("--enable-expert-parallel", ("-ep",), FLAG_MODE),
        _wiring("--data-parallel-rank", "-dpn"),
        _wiring("--data-parallel-start-rank", "-dpr"),
        _wiring("--data-parallel-address", "-dpa"),
        _wiring("--data-parallel-rpc-port", "-dpp"),
        _wiring("--data-parallel-backend", "-dpb"),
        _wiring("--data-parallel-hybrid-lb", "-dph"),
        _wiring("--data-parallel-external-lb", "-dpe"),
        _wiring("--data-parallel-multi-port-external-lb", "-dpm"),
        _wiring("--nnodes", "-n"),
        _wiring("--node-rank", "-r"),
        _wiring("--master-addr"),
        _wiring("--master-port"),
        # vLLM has a `-dc` option of its own: `-dc` is never an abbreviation of `-dcp` (§4.4).
        EngineFlag("-dc", (), FLAG_OTHER),
    ),
    degree_env="VLLM_DP_SIZE",
    degree_env_field="dp",
)

SGLANG_GRAMMAR = EngineGrammar(
    engine=ENGINE_SGLANG,
    rewrites_names=False,
    flags=(
        EngineFlag("--tp-size", ("--tensor-parallel-size",), FLAG_DEGREE, "tp", relayed=True),
        EngineFlag("--pp-size", ("--pipeline-parallel-size",), FLAG_DEGREE, "pp"),
        EngineFlag("--dp-size", ("--data-parallel-size",), FLAG_DEGREE, "dp", relayed=True),
        EngineFlag("--ep-size", ("--expert-parallel-size", "--ep"), FLAG_DEGREE, "ep"),
        EngineFlag("--dcp-size", ("--decode-context-parallel-size",), FLAG_DEGREE, "dcp"),
        EngineFlag("--attn-cp-size", ("--attention-context-parallel-size",), FLAG_DEGREE, "attn_cp"),
        EngineFlag("--moe-dp-size", ("--moe-data-parallel-size",), FLAG_DEGREE, "moe_dp"),
        EngineFlag("--dwdp-size", (), FLAG_DEGREE, "dwdp"),
        EngineFlag("--enable-dp-attention", (), FLAG_MODE),
        EngineFlag("--enable-prefill-cp", (), FLAG_MODE),
        _wiring("--nnodes"),
        _wiring("--node-rank"),
        _wiring("--dist-init-addr", "--nccl-init-addr"),
    ),
)

GRAMMARS: Mapping[str, EngineGrammar] = MappingProxyType(
    {ENGINE_VLLM: VLLM_GRAMMAR, ENGINE_SGLANG: SGLANG_GRAMMAR}
)

DEGREE_FIELDS = ("tp", "pp", "dp", "dpl", "pcp", "dcp", "ep", "attn_cp", "moe_dp", "dwdp")
"""Every degree a Degrees object carries, on any engine (defaults: 1, except dpl 0 = unset)."""

PORT_FLAG = "--port"
HOST_FLAG = "--host"

# --- Artifact-owned keys (model-delivery.md §3.4): refused with spec.model.artifactRef ---------------
ARTIFACT_OWNED_ARGS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        ENGINE_VLLM: frozenset({"--model", "--revision", "--tokenizer-revision", "--download-dir"}),
        ENGINE_SGLANG: frozenset({"--model-path", "--revision", "--download-dir"}),
    }
)
ARTIFACT_OWNED_ENV: frozenset[str] = frozenset(
    {
        "HF_TOKEN",
        "HF_ENDPOINT",
        "HF_HOME",
        "MODELSCOPE_API_TOKEN",
        "MODELSCOPE_DOMAIN",
        "MODELSCOPE_CACHE",
        "VLLM_USE_MODELSCOPE",
        "SGLANG_USE_MODELSCOPE",
    }
)
