"""The import graph points down only: api ← fastpath ← readmodels/kube ← webhooks/certs/controllers/nodeplugins
← gpustack_operator; nothing outside the command line imports controllers/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = (
    "api",
    "fastpath",
    "kube",
    "certs",
    "modelhub",
    "readmodels",
    "webhooks",
    "controllers",
    "nodeplugins",
    "gateway",
    "gpustack_operator",
)
# What each package may import of ours (besides itself).
ALLOWED = {
    "api": set(),
    "fastpath": {"api"},
    "kube": {"api"},
    "certs": {"api", "kube"},
    "modelhub": {"api"},  # the Hub client both the worker and the model manager use
    "readmodels": {"api", "fastpath"},  # read models both webhooks and controllers build on
    "webhooks": {"api", "fastpath", "kube", "certs", "readmodels"},
    "controllers": {"api", "fastpath", "kube", "certs", "modelhub", "readmodels", "webhooks"},
    "nodeplugins": {"api", "fastpath", "kube", "certs", "modelhub"},
    "gateway": {"api", "fastpath", "kube", "certs"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(OURS)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package: str) -> None:
    wrong = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        extra = _imports(path) - ALLOWED[package] - {package}
        if extra:
            wrong[str(path.relative_to(ROOT))] = sorted(extra)
    assert wrong == {}
