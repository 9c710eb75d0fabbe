"""Print the key of the wheelhouse and the venv stamp: what in pyproject.toml and setup.py decides
what gets installed (the build system, the project table, setuptools' settings), never the linters'
or pytest's sections — editing those must not make a machine resolve every wheel again.

Run by scripts/bootstrap.sh with the machine's python3 (3.11+: tomllib); images/build.py imports it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def deps_key(repo: Path = REPO) -> str:
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    tool = pyproject.get("tool", {})
    relevant = {
        "build-system": pyproject.get("build-system"),
        "project": pyproject.get("project"),
        "setuptools": {k: v for k, v in tool.items() if k.startswith("setuptools")},
    }
    digest = hashlib.sha256(json.dumps(relevant, sort_keys=True).encode())
    digest.update((repo / "setup.py").read_bytes())
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    print(deps_key(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO))
