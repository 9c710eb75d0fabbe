"""tests/cluster/down.sh --purge removes a cluster state dir and nothing that is not one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOWN = REPO / "tests" / "cluster" / "down.sh"


def _purge(state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUSTACK_CLUSTER_DIR": str(state_dir)}
    return subprocess.run(
        ["bash", str(DOWN), "--purge"], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_stopped_state_dir_is_removed(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    (state / "pids").mkdir(parents=True)
    (state / "kubeconfig").write_text("")
    done = _purge(state)
    assert done.returncode == 0, done.stderr
    assert not state.exists()


def test_a_directory_holding_a_git_repository_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("kept")
    done = _purge(tmp_path)
    assert done.returncode == 2
    assert "refusing to purge" in done.stderr and ".git" in done.stderr
    assert (tmp_path / "README.md").read_text() == "kept"
