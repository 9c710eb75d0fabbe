"""Write the stand-in engine's flag tables from the engines' own packages (a maintainer's tool).

The stand-in engine refuses a flag its engine would refuse, so it needs the flags each engine's
server accepts. They are read here from the argument definitions in the engines' wheels — the
``add_argument`` calls and the frontend dataclass fields, both parsed (the wheels are never
imported: vLLM needs torch) — and written to ``standin/flags/<engine>.txt`` with the version they
came from. Run again when the engines move::

    pip download --no-deps vllm==X sglang==Y -d /tmp/wheels
    python -m images.engine_flags /tmp/wheels/vllm-X-*.whl /tmp/wheels/sglang-Y-*.whl
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "standin" / "flags"

# Where each engine defines its server's arguments, inside its wheel.
SOURCES = {
    "vllm": ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py"),
    "sglang": ("sglang/srt/server_args.py",),
}
# vLLM's frontend options are dataclass fields turned into --kebab-case flags.
FRONTEND_CLASSES = ("BaseFrontendArgs", "FrontendArgs")


def option_strings(tree: ast.AST) -> set[str]:
    """Every ``-x``/``--xy`` string literal passed positionally to an ``add_argument`` call."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    found.add(arg.value)
    return found


def dataclass_flags(tree: ast.AST, classes: Iterable[str]) -> set[str]:
    wanted = set(classes)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in wanted:
            names = [
                i.target.id
                for i in node.body
                if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)
            ]
            found |= {"--" + name.replace("_", "-") for name in names if not name.startswith("_")}
    return found


def flags_of(wheel: Path, engine: str) -> set[str]:
    flags: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in SOURCES[engine]:
            tree = ast.parse(archive.read(member).decode())
            flags |= option_strings(tree)
            if engine == "vllm":
                flags |= dataclass_flags(tree, FRONTEND_CLASSES)
    return flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for wheel in args.wheels:
        match = re.match(r"(vllm|sglang)-([^-]+)-", wheel.name)
        if not match:
            print(f"{wheel.name}: not a vllm or sglang wheel", file=sys.stderr)
            return 2
        engine, version = match.groups()
        flags = sorted(flags_of(wheel, engine))
        text = f"# {engine} {version}: the flags its server accepts (images/engine_flags.py)\n"
        (OUT / f"{engine}.txt").write_text(text + "".join(f"{flag}\n" for flag in flags))
        print(f"{engine} {version}: {len(flags)} flags -> {OUT / f'{engine}.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
