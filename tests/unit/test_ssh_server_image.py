"""The sidecar's SSH server image (images/ssh-server): its configuration agrees with what the Pod
renderer mounts, and ``enter-main`` runs a session inside another mount namespace with that
process's environment, or refuses when no process sees the workspace.

The image is not built here; its scripts run as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from api import constants

IMAGE = Path(__file__).resolve().parents[2] / "images" / "ssh-server"


def _config() -> dict[str, str]:
    out = {}
    for line in (IMAGE / "sshd_config").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            out.setdefault(key, value.strip())
    return out


def test_keys_only_from_the_mounted_secret_and_every_session_through_enter_main() -> None:
    config = _config()
    assert (
        config["AuthorizedKeysFile"]
        == f"{constants.SSH_AUTHORIZED_KEYS_MOUNT}/{constants.SSH_AUTHORIZED_KEYS_FILE}"
    )
    assert config["Port"] == str(constants.SSH_PORT)
    assert config["PasswordAuthentication"] == "no"
    assert config["KbdInteractiveAuthentication"] == "no"
    assert config["PermitRootLogin"] == "prohibit-password"
    assert config["ForceCommand"] == "/usr/local/bin/enter-main"


def test_the_containerfile_installs_what_the_config_names() -> None:
    text = (IMAGE / "Containerfile").read_text()
    for source, target in (
        ("sshd_config", "/etc/ssh/sshd_config"),
        ("entrypoint.sh", "/usr/local/bin/entrypoint"),
        ("enter-main.sh", "/usr/local/bin/enter-main"),
    ):
        assert (IMAGE / source).is_file()
        assert f"COPY {source} {target}" in text
    assert 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' in text


@pytest.mark.parametrize("script", ["entrypoint.sh", "enter-main.sh"])
def test_scripts_are_valid_sh(script: str) -> None:
    subprocess.run(["sh", "-n", str(IMAGE / script)], check=True)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


needs_namespaces = pytest.mark.skipif(not _can_unshare(), reason="needs root with unshare and nsenter")


@needs_namespaces
def test_enter_main_runs_the_session_in_mains_namespaces_with_its_environment(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # "main": a process in its own mount namespace, the only one that sees the workspace.
    setup = (
        f"mount -t tmpfs none {mnt} && mkdir {mnt}/ws && echo from-main > {mnt}/ws/f && "
        "exec env -i 'MAIN_ONLY=main value' PATH=/usr/bin:/bin sleep 60"
    )
    main = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", setup])
    try:
        workspace = mnt / "ws"
        env = {"PATH": "/usr/bin:/bin", "VOLUME_MOUNT_PATH": str(workspace), "ENTER_MAIN_ENV": "/nonexistent"}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            result = subprocess.run(
                ["sh", str(IMAGE / "enter-main.sh")],
                env={**env, "SSH_ORIGINAL_COMMAND": 'echo "$MAIN_ONLY|$(pwd)|$(cat f)"'},
                capture_output=True,
                text=True,
            )
            if result.returncode == 0:
                break
            time.sleep(0.1)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"main value|{workspace}|from-main"
        # The sidecar itself cannot see the workspace: the session really is in main's namespace.
        assert not (workspace / "f").exists()
    finally:
        main.kill()
        main.wait()


@needs_namespaces
def test_enter_main_refuses_when_main_is_not_running(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "VOLUME_MOUNT_PATH": str(tmp_path / "absent"),
        "ENTER_MAIN_ENV": "/nonexistent",
    }
    result = subprocess.run(["sh", str(IMAGE / "enter-main.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert "main container is not running" in result.stderr
