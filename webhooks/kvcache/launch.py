"""The launch-shape analysis of Pod injection (kv-cache spec §3.5).

Injection appends the connector's arguments to a container's command line, so it must be sure those
arguments reach the engine.  :func:`analyse` reads ``command + args`` as one argv (``["sh","-c"] +
["x"]`` is ``["sh"] + ["-c","x"]``), strips transparent launchers, refuses a shell in command mode
and anything it cannot identify as the engine's entry point, unless the Pod declares
``kvcache.gpustack.ai/launch-args-forwarded: "true"`` where forwarding can be vouched for.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
PYTHONS = re.compile(r"^python(3(\.[0-9]+)?)?$")
SGLANG_MODULE = "sglang.launch_server"
VLLM_PROGRAM = "vllm"
SCRIPT_NAMES = frozenset({"entrypoint", "run"})

# env(1): options taking the next token (short, long); -S/--split-string hides a command line.
_ENV_LONG_OPERANDS = ("unset", "chdir", "argv0")
_TINI_OPERANDS = ("-p", "-e")
_DUMB_INIT_OPERANDS = ("-r", "--rewrite")
_TIMEOUT_OPERANDS = ("-s", "-k", "--signal", "--kill-after")
_FIX_LAUNCH = (
    "launch the engine directly (its executable in command, its arguments in args), or declare "
    'kvcache.gpustack.ai/launch-args-forwarded: "true" only if the launch passes appended arguments to the engine'
)


@dataclass(frozen=True, slots=True)
class Launch:
    """What admission concluded: the base name of the executable left after stripping launchers
    ("" when none could be read and forwarding was declared) and whether the forwarding declaration
    is what admitted it."""

    program: str
    forwarded: bool


class Refused(Exception):
    """A launch shape injection cannot serve; ``field`` is ``command`` or ``args``."""

    def __init__(self, message: str, field: str = "command") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def _env_token(token: str) -> str:
    """How env(1) reads one option token: ``split`` (-S, --split-string, any prefix or bundle),
    ``operand`` (it takes the next token), or ``flag``."""
    if token.startswith("--"):
        name = token[2:].split("=", 1)[0]
        if name and "split-string".startswith(name):
            return "split"
        wants = any(long.startswith(name) for long in _ENV_LONG_OPERANDS) if name else False
        return "operand" if wants and "=" not in token else "flag"
    for k, ch in enumerate(token[1:], 1):
        if ch == "S":
            return "split"
        if ch in "uCa":
            return "operand" if k == len(token) - 1 else "flag"  # -u NAME, or -uNAME attached
    return "flag"


def _strip_env(argv: list[str], forwarding: bool) -> list[str] | None:
    """After ``env``: the command it runs, or ``None`` when ``-S`` hides it in one string."""
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[i + 1 :]
        if token.startswith("-") and token != "-":
            kind = _env_token(token)
            if kind == "split":
                if not forwarding:
                    raise Refused(
                        f"env {token} hides the command line inside one argument, so admission cannot tell whether "
                        f"the engine (or a shell) runs it; {_FIX_LAUNCH}"
                    )
                return None
            i += 2 if kind == "operand" else 1
            continue
        if token == "-" or ("=" in token and not token.startswith("=")):
            i += 1  # "-" (like -i) or NAME=value
            continue
        return argv[i:]
    return []


def _strip_options(argv: list[str], operands: tuple[str, ...], *, positional: int = 0) -> list[str]:
    """Skip a launcher's options (and ``positional`` leading operands, e.g. timeout's DURATION)."""
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token in operands:
            i += 2
            continue
        if token.startswith("-") and token != "-":
            i += 1
            continue
        break
    return argv[i + positional :] if i + positional <= len(argv) else []


def strip_launchers(argv: list[str], forwarding: bool) -> list[str] | None:
    """Rule 3: remove transparent launcher prefixes, repeatedly; ``None`` when the rest is hidden."""
    while argv:
        name = posixpath.basename(argv[0])
        if name == "env":
            rest = _strip_env(argv, forwarding)
        elif name == "tini":
            rest = _strip_options(argv, _TINI_OPERANDS)
        elif name == "dumb-init":
            rest = _strip_options(argv, _DUMB_INIT_OPERANDS)
        elif name in ("busybox", "toybox"):
            rest = argv[1:]
        elif name == "timeout":
            rest = _strip_options(argv, _TIMEOUT_OPERANDS, positional=1)
        else:
            return argv
        if rest is None:
            return None
        if not rest:
            raise Refused(
                f"the launcher {name} has nothing after it: the appended connector flag would become the command "
                "it runs; put the engine executable and its arguments after the launcher"
            )
        argv = rest
    return argv


def _shell_script(argv: list[str]) -> str | None:
    """Rule 5: a shell's first operand (its script), refusing command mode before it."""
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if token in ("--rcfile", "--init-file"):
            i += 2
            continue
        if token.startswith("--"):
            i += 1
            continue
        if len(token) > 1 and token[0] in "-+":
            if "c" in token[1:]:
                raise Refused(
                    f"{posixpath.basename(argv[0])} {token} runs a command string: an appended flag would become the "
                    "shell's $0 and never reach the engine (not exemptable); launch the engine directly, or add the "
                    "connector flag to the script yourself"
                )
            i += 2 if token[-1] in "oO" else 1
            continue
        return token
    return None


def _sglang_entry(argv: list[str]) -> bool:
    if not PYTHONS.match(posixpath.basename(argv[0])):
        return False
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            return i + 1 < len(argv) and argv[i + 1] == SGLANG_MODULE
        if token.startswith("-m"):
            return token[2:] == SGLANG_MODULE
        if token in ("-X", "-W"):
            i += 2
            continue
        if token.startswith("-") and token != "-":
            i += 1
            continue
        return False
    return False


def _is_entry(engine: str, argv: list[str]) -> bool:
    if engine == "SGLang":
        return _sglang_entry(argv)
    return posixpath.basename(argv[0]) == VLLM_PROGRAM


def analyse(engine: str, command: Any, args: Any, *, forwarding: bool) -> Launch:
    """§3.5 rules 1–7 on one container; raises :class:`Refused` with the rule's message."""
    command = [t for t in command if isinstance(t, str)] if isinstance(command, list) else []
    args = [t for t in args if isinstance(t, str)] if isinstance(args, list) else []
    if not command and not args:
        raise Refused(
            "the container declares neither command nor args: appending would make the connector flags the whole "
            "command line and discard the image's CMD; put the engine executable in command and its arguments in args"
        )
    if not command:
        if forwarding:
            return Launch("", True)
        raise Refused(
            "args without command run behind the image ENTRYPOINT, which admission cannot read; put the engine "
            'executable in command, or declare kvcache.gpustack.ai/launch-args-forwarded: "true" only if the '
            "ENTRYPOINT forwards its arguments",
            field="args",
        )
    argv = strip_launchers(command + args, forwarding)
    if argv is None:
        return Launch("", True)
    program = argv[0]
    # The record names the executable by its base name, wherever the image keeps it.
    recorded = posixpath.basename(program)
    script = _shell_script(argv) if recorded in SHELLS else None
    named = posixpath.basename(script or program)
    if named.endswith(".sh") or named in SCRIPT_NAMES:
        if forwarding:
            return Launch(recorded, True)
        raise Refused(
            f"{script or program} is a script: whether appended arguments reach the engine depends on the script "
            f'forwarding "$@", which admission cannot read; {_FIX_LAUNCH}'
        )
    if _is_entry(engine, argv):
        return Launch(recorded, False)
    if forwarding:
        return Launch(recorded, True)
    wanted = "python3 -m sglang.launch_server" if engine == "SGLang" else "vllm"
    raise Refused(
        f"{program} is not {engine}'s entry point ({wanted}): the webhook would configure one engine inside another "
        f"program, or trust an unknown launcher; {_FIX_LAUNCH}"
    )
