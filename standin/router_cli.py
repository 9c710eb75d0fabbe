"""``vllm-router``'s command line, read as its clap parser reads it (only what a stand-in needs).

The table is vllm-project/router's ``src/main.rs`` (``CliArgs``, at commit 03e9af5c): each long flag
with how many values it takes and what it accepts. Clap's rules, as far as the controller's lines and
an ``extraArgs`` reach: ``--flag value`` or ``--flag=value``; a switch takes no value; a list
(``num_args = 0..``) takes every following token up to the next one starting with ``-``; ``--decode``
may repeat; any other flag given twice, an unknown flag, a stray value, a number that is no number and
a choice outside its list are refused with clap's words, exit status 2. ``--prefill URL [PORT]`` is
read before clap, as the router does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROGRAM = "vllm-router"
SWITCH, ONE, MANY, APPEND = "switch", "one", "many", "append"
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "consistent_hash", "sticky_least_loaded",
            "rendezvous_hash")  # fmt: skip
CHOICES: dict[str, tuple[str, ...]] = {
    "--policy": POLICIES,
    "--prefill-policy": POLICIES,
    "--decode-policy": POLICIES,
    "--backend": ("vllm", "trtllm", "openai", "anthropic"),
    "--log-level": ("debug", "info", "warn", "error"),
    "--history-backend": ("memory", "none"),
    "--kv-connector": ("nixl", "mooncake", "moriio"),
}
PORTS = frozenset({"--port", "--prometheus-port", "--service-discovery-port"})  # u16
INTEGERS = frozenset({
    "--worker-startup-timeout-secs", "--worker-startup-check-interval", "--balance-abs-threshold",
    "--eviction-interval", "--max-tree-size", "--max-payload-size", "--intra-node-data-parallel-size",
    "--request-timeout-secs", "--max-concurrent-requests", "--retry-max-retries", "--retry-initial-backoff-ms",
    "--retry-max-backoff-ms", "--cb-failure-threshold", "--cb-success-threshold", "--cb-timeout-duration-secs",
    "--cb-window-duration-secs", "--health-failure-threshold", "--health-success-threshold",
    "--health-check-timeout-secs", "--health-check-interval-secs",
})  # fmt: skip
FLOATS = frozenset({"--cache-threshold", "--balance-rel-threshold", "--otel-sampling-ratio",
                    "--retry-backoff-multiplier", "--retry-jitter-factor"})  # fmt: skip
FLAGS: dict[str, str] = {
    **{f: SWITCH for f in ("--vllm-pd-disaggregation", "--enable-trace", "--service-discovery", "--disable-retries",
                           "--disable-circuit-breaker", "--enable-igw", "--profile")},
    **{f: MANY for f in ("--worker-urls", "--api-key-validation-urls", "--otel-excluded-paths", "--selector",
                         "--prefill-selector", "--decode-selector", "--request-id-headers",
                         "--cors-allowed-origins")},
    "--decode": APPEND,
    **{f: ONE for f in ("--host", "--prometheus-host", "--vllm-discovery-address", "--api-key", "--log-dir", "--otlp-traces-endpoint",
                        "--service-discovery-namespace", "--health-check-endpoint", *CHOICES, *PORTS, *INTEGERS,
                        *FLOATS)},
}  # fmt: skip
ALIASES = {"--runtime": "--backend"}


class Refused(Exception):
    """The router would not start on this command line; the message is what it would print."""


@dataclass
class RouterLaunch:
    host: str = "127.0.0.1"
    port: int = 30000
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 29000
    policy: str = "cache_aware"
    pd: bool = False
    kv_connector: str = "nixl"
    discovery: bool = False
    namespace: str | None = None
    target_port: int = 80
    selector: dict[str, str] = field(default_factory=dict)
    prefill_selector: dict[str, str] = field(default_factory=dict)
    decode_selector: dict[str, str] = field(default_factory=dict)
    worker_urls: list[str] = field(default_factory=list)
    prefill_urls: list[str] = field(default_factory=list)
    decode_urls: list[str] = field(default_factory=list)
    request_timeout: int = 1800
    flags: dict[str, list[str]] = field(default_factory=dict)


def _refuse(message: str) -> Refused:
    return Refused(f"error: {message}\n\nFor more information, try '--help'.")


def _split_prefill(argv: list[str]) -> tuple[list[str], list[str]]:
    """``--prefill URL [PORT|none]`` taken out before clap parses the rest (main.rs does the same)."""
    prefill: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token != "--prefill":
            rest.append(token)
            continue
        if i >= len(argv):
            raise Refused("--prefill requires a URL immediately after")
        url = argv[i]
        i += 1
        if url.startswith("-"):
            raise Refused(f"Invalid url {url}")
        if i < len(argv) and (argv[i].lower() == "none" or (argv[i].isdigit() and int(argv[i]) < 65536)):
            i += 1  # the bootstrap port: a real KV transfer's business, not the stand-in's
        prefill.append(url)
    return prefill, rest


def _check(flag: str, value: str) -> None:
    metavar = flag[2:].upper().replace("-", "_")
    if flag in CHOICES and value not in CHOICES[flag]:
        possible = ", ".join(CHOICES[flag])
        raise _refuse(f"invalid value '{value}' for '{flag} <{metavar}>'\n  [possible values: {possible}]")
    try:
        if flag in PORTS and not 0 <= int(value) < 65536:
            raise ValueError
        if flag in INTEGERS and int(value) < 0:
            raise ValueError
        if flag in FLOATS:
            float(value)
    except ValueError:
        raise _refuse(
            f"invalid value '{value}' for '{flag} <{metavar}>': invalid digit found in string"
        ) from None


def _selector(values: list[str]) -> dict[str, str]:
    """``key=value`` items, as ``parse_selector`` reads them (an item without ``=`` is skipped)."""
    return dict(item.split("=", 1) for item in values if "=" in item)


def parse(argv: list[str]) -> RouterLaunch:
    """A launch from the arguments after the ``vllm-router`` program."""
    prefill, argv = _split_prefill(argv)
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            raise _refuse(f"unexpected argument '{token}' found")
        name, eq, inline = token.partition("=")
        name = ALIASES.get(name, name)
        kind = FLAGS.get(name)
        if kind is None:
            raise _refuse(f"unexpected argument '{name}' found")
        if name in flags and kind not in (APPEND, MANY):
            raise _refuse(f"the argument '{name}' cannot be used multiple times")
        values: list[str] = []
        if kind == SWITCH:
            if eq:
                raise _refuse(f"unexpected value '{inline}' for '{name}' found; no more were expected")
        elif eq:
            values.append(inline)
        elif kind == MANY:
            while i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
        elif i < len(argv) and not argv[i].startswith("-"):
            values.append(argv[i])
            i += 1
        else:
            raise _refuse(
                f"a value is required for '{name} <{name[2:].upper().replace('-', '_')}>' but none was supplied"
            )
        for value in values if kind != MANY else []:
            _check(name, value)
        flags.setdefault(name, []).extend(values)
    return _launch(flags, prefill)


def _launch(flags: dict[str, list[str]], prefill: list[str]) -> RouterLaunch:
    def one(flag: str, default: str) -> str:
        return (flags.get(flag) or [default])[-1]

    launch = RouterLaunch(
        host=one("--host", "127.0.0.1"),
        port=int(one("--port", "30000")),
        prometheus_host=one("--prometheus-host", "127.0.0.1"),
        prometheus_port=int(one("--prometheus-port", "29000")),
        policy=one("--policy", "cache_aware"),
        pd="--vllm-pd-disaggregation" in flags,
        kv_connector=one("--kv-connector", "nixl"),
        discovery="--service-discovery" in flags,
        namespace=one("--service-discovery-namespace", "") or None,
        target_port=int(one("--service-discovery-port", "80")),
        selector=_selector(flags.get("--selector", [])),
        prefill_selector=_selector(flags.get("--prefill-selector", [])),
        decode_selector=_selector(flags.get("--decode-selector", [])),
        worker_urls=list(flags.get("--worker-urls", [])),
        prefill_urls=prefill,
        decode_urls=list(flags.get("--decode", [])),
        request_timeout=int(one("--request-timeout-secs", "1800")),
        flags=flags,
    )
    # to_router_config's validation, in its words.
    if launch.pd:
        k8s = launch.discovery and (launch.prefill_selector or launch.decode_selector)
        static = launch.prefill_urls or launch.decode_urls
        if not (k8s or static or "--vllm-discovery-address" in flags):
            raise Refused(
                "Configuration validation failed: vLLM PD disaggregation mode requires one of: "
                "--vllm-discovery-address, --prefill/--decode URLs, or --service-discovery with "
                "--prefill-selector/--decode-selector"
            )
        if "--vllm-discovery-address" in flags and not (k8s or static):
            raise Refused(
                "vllm-router stand-in: ZMQ service discovery (--vllm-discovery-address) is not simulated"
            )
    elif not launch.discovery and not launch.worker_urls:
        raise Refused(
            "Configuration validation failed: Regular mode requires --worker-urls when not using service discovery"
        )
    return launch
