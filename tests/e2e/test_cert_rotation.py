"""Rotating the serving certificate under load: the worker reloads it and no admission fails."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from tests.cases import pods
from tests.net import served_serial

from .conftest import ensure_namespace, gpustack

pytestmark = pytest.mark.e2e


def _served_serial(op) -> int:
    return served_serial(op.port, str(op.cert_dir / "ca.crt"))


def test_rotation_under_load_fails_no_admission(cluster, webhooks):
    ensure_namespace(cluster, "rotation")
    pod = pods.case_pod(pods.CASES[0])
    pod["metadata"].update(name="rotation", namespace="rotation")
    failures: list[str] = []
    done = threading.Event()
    count = 0

    def admit_continuously() -> None:
        nonlocal count
        while not done.is_set():
            result = cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
            )
            count += 1
            if result.returncode != 0:
                failures.append(result.stderr)

    before = _served_serial(webhooks)
    thread = threading.Thread(target=admit_continuously)
    thread.start()
    try:
        time.sleep(2)
        subprocess.run(
            [
                gpustack.PYTHON,
                "-m",
                "gpustack_operator",
                "certs",
                "--dir",
                str(webhooks.cert_dir),
                "--ip",
                "127.0.0.1",
                "--dns",
                "localhost",
                "--rotate-before",
                "9000h",
            ],
            cwd=gpustack.REPO,
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 20
        while _served_serial(webhooks) == before and time.monotonic() < deadline:
            time.sleep(0.5)
        # Keep admitting across the switch until a few more reviews went through (a loaded
        # machine runs kubectl slowly, so wait for reviews, not for a fixed time).
        rotated_at = count
        deadline = time.monotonic() + 120
        while count < max(rotated_at + 3, 6) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        done.set()
        thread.join(60)
    assert _served_serial(webhooks) != before, "the worker kept serving the old certificate"
    assert count > 5 and failures == []
