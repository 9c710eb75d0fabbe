"""No ``log.*(..., extra={...})`` in the project names a field the LogRecord already has.

``logging`` raises KeyError for such a key (``created``, ``name``, ``args``...) inside the log call,
so the line is lost and the caller's work stops there: a prefetch reconcile that logged
``created=`` failed before it wrote its status.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpustack_operator.logs import RESERVED

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "build", ".git", "node_modules"}


def _sources() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if not SKIP.intersection(p.relative_to(ROOT).parts)]


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
