"""Rotating the serving certificate under load: the worker reloads it and no admission fails."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from tests.cases import pods
from tests.net import served_serial

from .conftest import ensure_namespace, gpustack, harness

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
        # Reviews are flowing before the rotation...
        harness.wait_for(
            lambda: count >= 3, timeout=120, interval=0.1, what="three admissions before the rotation"
        )
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
        harness.wait_for(
            lambda: _served_serial(webhooks) != before,
            timeout=30,
            what="the worker serving the new certificate",
        )
        # ... and keep flowing after the switch: three more reviews, all answered.
        rotated_at = count
        harness.wait_for(
            lambda: count >= rotated_at + 3,
            timeout=120,
            interval=0.1,
            what="three admissions after the rotation",
        )
        after_switch = count - rotated_at
    finally:
        done.set()
        thread.join(60)
    assert after_switch >= 3 and failures == [], failures
