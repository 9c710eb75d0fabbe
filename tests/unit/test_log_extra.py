"""No ``log.*(..., extra={...})`` in the project names a field the LogRecord already has.

``logging`` raises KeyError for such a key (``created``, ``name``, ``args``...) inside the log call,
so the line is lost and the caller's work stops there: a prefetch reconcile that logged
``created=`` failed before it wrote its status.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from gpustack_operator.logs import RESERVED

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"build", "node_modules"}


def _skipped(part: str) -> bool:
    """``build/``, ``node_modules/`` and every dot folder: ``.venv``, ``.git``, and ``.dev``, where
    the e2e lanes unpack container images (their files come and go while this test reads)."""
    return part in SKIP or part.startswith(".")


def _sources() -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not _skipped(d)]  # never walked into
        found += [Path(folder, f) for f in files if f.endswith(".py")]
    return found


def _reserved_keys(path: Path) -> list[str]:
    """``path:line: 'key'`` for each reserved key given as a literal ``extra=`` dict key."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                found += [
                    f"{path}:{node.lineno}: {key.value!r}"
                    for key in keyword.value.keys
                    if isinstance(key, ast.Constant) and key.value in RESERVED
                ]
    return found


def test_the_scan_finds_a_reserved_key(tmp_path: Path) -> None:
    assert Path(__file__).resolve() in _sources()
    bad = tmp_path / "bad.py"
    bad.write_text('log.info("x", extra={"created": 1, "pods": 2})\n')
    assert _reserved_keys(bad) == [f"{bad}:1: 'created'"]


def test_no_log_call_names_a_logrecord_field() -> None:
    found = [line for path in _sources() for line in _reserved_keys(path)]
    assert not found, "rename these extra= keys (logging refuses them):\n" + "\n".join(found)
