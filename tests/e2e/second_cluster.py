"""A second local control plane beside the e2e lane's own: on the lane's ``second-cluster`` port
block (tests/cluster/ports.py) and a state dir of its own. One module at a time uses it (the gateway
module's other cluster; the containers module's cluster without the harness's Kueue)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import harness
import ports

KEEP = os.environ.get("GPUSTACK_CLUSTER_KEEP", "") in ("1", "true", "yes")


def port_env() -> dict[str, str]:
    """``GPUSTACK_<COMPONENT>_PORT`` for the second control plane (``GPUSTACK_SECOND_*`` pins one)."""
    return {
        f"GPUSTACK_{name}_PORT": os.environ.get(
            f"GPUSTACK_SECOND_{name}_PORT", str(ports.e2e_block("second-cluster")[name])
        )
        for name in ports.CONTROL_PLANE
    }


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` for the block (what harness scripts and node helpers read)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def state_dir(name: str) -> Path:
    return (harness.REPO_ROOT / ".dev" / name).resolve()


def _log_tails(directory: Path, lines: int = 25) -> str:
    """The last lines of the control plane's logs (up.sh keeps them when a start fails)."""
    tails = []
    for name in ("kube-apiserver.log", "etcd.log"):
        path = directory / "logs" / name
        if path.exists():
            tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(tails) or "(no logs)"


def start(directory: Path, env: dict[str, str]) -> harness.ClusterInfo:
    """Start it fresh (a stopped one's leftovers are purged first) under ``env``. A start that fails
    is tried once more from a purged directory, the first failure's logs printed."""
    with environment(env):
        if not harness.is_running(directory) and directory.exists():
            harness.stop(directory, purge=True)
        try:
            return harness.start(directory)
        except harness.ClusterError as error:
            first = _log_tails(directory)
            print(f"second cluster {directory.name}: start failed, trying once more: {error}\n{first}",
                  file=sys.stderr, flush=True)  # fmt: skip
            harness.stop(directory, purge=True)
            try:
                return harness.start(directory)
            except harness.ClusterError as again:
                raise harness.ClusterError(f"{again}\nthe first try's logs:\n{first}") from again


def stop(info: harness.ClusterInfo, directory: Path, env: dict[str, str]) -> None:
    """Purge it unless GPUSTACK_CLUSTER_KEEP, or unless this run found it running."""
    if info.started and not KEEP:
        with environment(env):
            harness.stop(directory, purge=True)
