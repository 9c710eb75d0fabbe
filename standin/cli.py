"""The engines' command lines, read as the engines read them (only what a stand-in needs).

vLLM: ``vllm serve [MODEL] [--flag[=value] | --flag value]…``; underscores in a flag's name are
dashes (vLLM's parser rewrites them), ``--no-X`` is the negation of a boolean ``--X``, and
``--X.key`` sets one key of a JSON config flag ``--X``. SGLang: ``python3 -m sglang.launch_server
--model-path MODEL …`` with plain argparse names. A flag outside the engine's table is refused with
the engine's own words (``unrecognized arguments``); so are values the engine would not parse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

FLAGS_DIR = Path(__file__).resolve().parent / "flags"
VLLM, SGLANG = "vllm", "sglang"
INT_FLAGS = frozenset(
    {
        "--port",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--tp-size",
        "--pp-size",
        "--dp-size",
        "--max-model-len",
        "--context-length",
    }
)
ALIASES = {
    VLLM: {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size"},
    SGLANG: {
        "--model": "--model-path",
        "--tp": "--tensor-parallel-size",
        "--tp-size": "--tensor-parallel-size",
        "--pp-size": "--pipeline-parallel-size",
        "--dp": "--data-parallel-size",
        "--dp-size": "--data-parallel-size",
    },
}
SGLANG_DISAGGREGATION = ("null", "prefill", "decode")
MANY_VALUES = {VLLM: frozenset({"--served-model-name"}), SGLANG: frozenset()}  # nargs="+"


class Refused(Exception):
    """The engine would not start on this command line; the message is what it would print."""


@dataclass
class Launch:
    engine: str
    model: str
    host: str = "0.0.0.0"
    port: int = 8000
    served_names: list[str] = field(default_factory=list)
    flags: dict[str, list[str | None]] = field(default_factory=dict)

    def value(self, flag: str) -> str | None:
        values = self.flags.get(flag)
        return values[-1] if values else None

    def number(self, flag: str, default: int = 1) -> int:
        text = self.value(flag)
        return int(text) if text is not None else default

    @property
    def names(self) -> list[str]:
        """What ``/v1/models`` lists: the served names, else the model as given."""
        return self.served_names or [self.model]

    @property
    def role(self) -> str:
        """``prefill``, ``decode`` or ``server``, from the P/D flags of either engine."""
        mode = self.value("--disaggregation-mode")
        if mode in ("prefill", "decode"):
            return mode
        config = self.value("--kv-transfer-config")
        if config:
            kv_role = str(json.loads(config).get("kv_role") or "")
            return {"kv_producer": "prefill", "kv_consumer": "decode"}.get(kv_role, "server")
        return "server"


@cache
def known_flags(engine: str) -> frozenset[str]:
    lines = (FLAGS_DIR / f"{engine}.txt").read_text().splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _canonical(engine: str, name: str) -> str | None:
    """The table's name for ``name`` as the engine reads it, or None when the engine refuses it."""
    known = known_flags(engine)
    if engine == VLLM and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    name = ALIASES[engine].get(name, name)
    if name in known:
        return name
    if engine == VLLM:
        if name.startswith("--no-") and "--" + name[5:] in known:
            return name
        base = name.split(".", 1)[0]
        if "." in name and base in known:
            return name
    return None


def _split(engine: str, argv: list[str]) -> tuple[list[str], dict[str, list[str | None]]]:
    positionals: list[str] = []
    flags: dict[str, list[str | None]] = {}
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-") or token == "-":
            positionals.append(token)
            continue
        name, eq, inline = token.partition("=")
        canonical = _canonical(engine, name)
        if canonical is None:
            unknown.append(token)
            if not eq and i < len(argv) and not argv[i].startswith("-"):
                unknown.append(argv[i])
                i += 1
            continue
        value: str | None
        if eq:
            value = inline
        elif i < len(argv) and not argv[i].startswith("-"):
            value = argv[i]
            i += 1
            while canonical in MANY_VALUES[engine] and i < len(argv) and not argv[i].startswith("-"):
                value += " " + argv[i]
                i += 1
        else:
            value = None
        flags.setdefault(canonical, []).append(value)
    if unknown:
        raise Refused(f"{engine}: error: unrecognized arguments: {' '.join(unknown)}")
    return positionals, flags


def _check_values(engine: str, flags: dict[str, list[str | None]]) -> None:
    for flag, values in flags.items():
        for value in values:
            if flag in INT_FLAGS:
                try:
                    int(value or "")
                except ValueError:
                    raise Refused(f"{engine}: error: argument {flag}: invalid int value: {value!r}") from None
            elif engine == VLLM and flag.endswith("-config") and value and value.lstrip().startswith("{"):
                try:
                    json.loads(value)
                except ValueError as error:
                    raise Refused(f"{engine}: error: argument {flag}: invalid JSON ({error})") from None
    mode = (flags.get("--disaggregation-mode") or [None])[-1]
    if engine == SGLANG and mode is not None and mode not in SGLANG_DISAGGREGATION:
        raise Refused(
            f"{engine}: error: argument --disaggregation-mode: invalid choice: {mode!r} "
            f"(choose from {', '.join(SGLANG_DISAGGREGATION)})"
        )


def parse(engine: str, argv: list[str]) -> Launch:
    """A launch from the arguments after the engine's program (``vllm`` / ``-m sglang.launch_server``)."""
    if engine == VLLM:
        if not argv or argv[0] != "serve":
            raise Refused("vllm: this stand-in serves only `vllm serve`")
        argv = argv[1:]
    positionals, flags = _split(engine, argv)
    _check_values(engine, flags)
    model_flag = "--model" if engine == VLLM else "--model-path"
    model = (flags.get(model_flag) or [None])[-1]
    if engine == VLLM and positionals:
        model = positionals.pop(0)
    if positionals:
        raise Refused(f"{engine}: error: unrecognized arguments: {' '.join(positionals)}")
    if not model:
        raise Refused(f"{engine}: error: the following arguments are required: {model_flag}")
    launch = Launch(engine, model, flags=flags)
    launch.host = launch.value("--host") or launch.host
    launch.port = launch.number("--port", 8000 if engine == VLLM else 30000)
    for raw in flags.get("--served-model-name") or []:
        launch.served_names += [n for n in (raw or "").split() if n]
    return launch
