"""The benchmarks' Go helpers, built once into ``~/.cache`` per content of their source and of the
module pins they build against (``tests/cluster/kube``, ``tests/cluster/kueue``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from images.build import CACHE_ROOT


def built(module: Path, program: str) -> Path:
    """The binary of ``module/program`` (a ``main`` package of one ``main.go``), built if this
    content of its source, ``go.mod`` and ``go.sum`` was never built here."""
    key = hashlib.sha256()
    for path in (module / "go.mod", module / "go.sum", module / program / "main.go"):
        key.update(path.read_bytes())
    name = Path(program).name
    directory = CACHE_ROOT / "bench-bin" / key.hexdigest()[:16]
    binary = directory / name
    if not binary.exists():
        directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -trimpath"}
        scratch = directory / f"{name}.partial"
        subprocess.run(["go", "build", "-o", str(scratch), f"./{program}"], cwd=module, env=env, check=True)
        scratch.rename(binary)
    return binary
