"""Scrape the real ``/metrics`` endpoints — the worker's (uvicorn over TLS, a controller manager over
the in-memory apiserver, ``--metrics-auth``), the device manager's and the model manager's side
ports — and check that every metric docs/metrics.md lists for the component is served, and that
every sample carries exactly the documented labels."""

from __future__ import annotations

import json
import ssl
import threading
import time
import types
import urllib.request
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import gpustack_operator.worker  # noqa: F401  (the worker process's module: it registers gpustack_build_info)
from controllers import metrics as state_metrics
from kube.client import Client
from kube.manager import Controller, Manager, Watch
from kube.metrics_auth import MetricsAuthorizer
from tests.net import free_port, serve_tls
from tests.unit.metrics_fixtures import ReviewingApiServer, documented, scrape
from tests.unit.test_metrics_state import OBJECTS
from tests.webhooks.reviews import body
from webhooks import server
from webhooks.lookups import FileLookups

READER: dict[str, Any] = {"username": "system:serviceaccount:monitoring:prometheus", "groups": []}


def wait(check, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def served(text: str) -> tuple[set[str], dict[str, set[tuple[str, ...]]]]:
    """The exposition read back: the documented names of the families it declares, and per
    documented name the label-name sets of its samples (``le`` and ``_created`` left aside)."""
    families: set[str] = set()
    labels: dict[str, set[tuple[str, ...]]] = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        families.add(name)
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels.setdefault(name, set()).add(tuple(sorted(set(sample.labels) - {"le"})))
    return families, labels


def check_component(text: str, section: str, *, with_samples: set[str] | None = None) -> None:
    docs = {n: d for n, d in documented().items() if d.section in (section, "Every component")}
    assert docs, section
    families, labels = served(text)
    assert sorted(set(docs) - families) == [], f"documented for the {section} but not served"
    wrong = {
        name: sorted(found)
        for name, found in labels.items()
        if name in docs and found != {tuple(sorted(docs[name].labels))}
    }
    assert wrong == {}, "samples whose labels differ from the documented ones"
    for name in with_samples or set():
        assert name in labels, f"{name} has no sample"


# --- the worker ------------------------------------------------------------------------------------


class Echo(Controller):
    """A controller with work, so the reconcile metrics have samples."""

    name = "echo"

    def watches(self) -> list[Watch]:
        return [Watch("InstanceType", lambda event, obj, old: [obj["metadata"]["name"]])]

    def reconcile(self, key: Hashable) -> float | None:
        return None


@pytest.fixture
def worker_url(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    apiserver = ReviewingApiServer(tokens={"reader": READER}, readers={READER["username"]})
    for objects in OBJECTS.values():
        for obj in objects:
            apiserver.put({"apiVersion": "worker.gpustack.ai/v1", **obj})
    client = Client(apiserver)  # type: ignore[arg-type]
    manager = Manager(client, leader_election=False)
    manager.add(Echo)
    state_metrics.register(manager)  # as Worker.start_controllers does: before start
    manager.start(wait=True, sync_timeout=20)
    assert wait(manager.settled), "the manager never settled"
    app = server.create_app(
        FileLookups(), webhooks=(), include_null=True, metrics_auth=MetricsAuthorizer(client)
    )
    try:
        with serve_tls(app, tmp_path) as url:
            yield url, tmp_path / "ca.crt"
    finally:
        manager.stop()


def test_the_worker_serves_every_documented_worker_metric(worker_url: tuple[str, Path]) -> None:
    url, ca = worker_url
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(
        f"{url}{server.NULL_PATH}",
        data=body({"metadata": {"name": "p"}}),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:  # one admission answered
        assert json.loads(answer.read())["response"]["allowed"] is True
    assert scrape(f"{url}/metrics", ca=ca)[0] == 401
    status, content_type, text = scrape(f"{url}/metrics", token="reader", ca=ca)
    assert status == 200 and content_type.startswith("text/plain; version=")
    check_component(
        text,
        "Worker",
        with_samples={
            *state_metrics.CATALOG,
            "gpustack_build_info",
            "gpustack_worker_leader",
            "gpustack_controllers_settled",
            "gpustack_controller_reconciles_total",
            "gpustack_controller_reconcile_duration_seconds",
            "gpustack_controller_queue_depth",
            "gpustack_webhook_requests_total",
            "gpustack_webhook_request_duration_seconds",
        },
    )
    # The state the fake apiserver holds, read from the manager's caches at scrape time.
    assert 'gpustack_instance_type_remaining{instance_type="a10g",view="exclusive"} 0.0' in text
    assert 'gpustack_instance_type_pending_workloads{instance_type="a10g"} 2.0' in text
    assert 'gpustack_model_deployment_phase{name="qwen",namespace="team-a",phase="Degraded"} 1.0' in text
    assert "gpustack_worker_leader 1.0" in text and "gpustack_controllers_settled 1.0" in text
    assert 'webhook="null"' in text


# --- the node agents -------------------------------------------------------------------------------


def test_the_device_manager_serves_every_documented_device_manager_metric(tmp_path: Path) -> None:
    from nodeplugins.devicemanager import agent

    manager = types.SimpleNamespace(
        args=types.SimpleNamespace(cert_dir=str(tmp_path), bind_address="127.0.0.1", secure_port=free_port()),
        ready=True,
        link=None,
        blocked=None,
    )
    http = agent.serve_http(manager)  # type: ignore[arg-type]
    try:
        status, content_type, text = scrape(
            f"https://127.0.0.1:{manager.args.secure_port}/metrics", ca=tmp_path / "ca.crt"
        )
    finally:
        http.shutdown()
    assert status == 200 and content_type.startswith("text/plain")
    check_component(text, "Device manager", with_samples={"gpustack_build_info"})


def test_the_device_managers_detection_pass_moves_its_last_pass_time() -> None:
    from nodeplugins.devicemanager import agent

    dm = agent.DeviceManager.__new__(agent.DeviceManager)
    dm.args = types.SimpleNamespace(simulate="", monitor_period=60.0)  # type: ignore[assignment]
    dm.stopping = threading.Event()
    dm.detect_now = threading.Event()
    passes = iter([False, True])  # a pass that did not detect (no card answered), then one that did
    seen: list[float] = []

    def detect_once() -> bool:
        seen.append(agent.LAST_PASS._value.get())
        dm.detect_now.set()  # the next pass at once
        try:
            return next(passes)
        except StopIteration:
            dm.stopping.set()
            return False

    dm.detect_once = detect_once  # type: ignore[method-assign]
    agent.LAST_PASS.set(0)
    before = time.time()
    dm.detection_loop()
    assert seen[:2] == [0.0, 0.0] and seen[2] >= before  # moved by the pass that detected only


def test_the_model_manager_serves_every_documented_model_manager_metric(tmp_path: Path) -> None:
    from nodeplugins.modelmanager import main, metrics, mounts
    from nodeplugins.modelmanager.agent import Agent, AgentOptions
    from tests.kube_fake import FakeApiServer
    from tests.unit.delivery.conftest import SimulatedDisk
    from tests.unit.delivery.test_publish import Kernel

    root, kubelet = tmp_path / "cache", tmp_path / "kubelet"
    root.mkdir()
    (kubelet / "pods").mkdir(parents=True)
    metrics.LAST_PASS.set(0)
    node_agent = Agent(
        AgentOptions("node-1", root, kubelet, tick=0.05, disk=SimulatedDisk()),
        Client(FakeApiServer()),  # type: ignore[arg-type]
        ops=Kernel(mounts.device_of(root)).ops(),
    )
    node_agent.start(sync_timeout=10)
    serving = threading.Event()
    side = main._SideServer(("127.0.0.1", free_port()), node_agent, serving)
    args = types.SimpleNamespace(tls_cert=None, tls_key=None, node_name="localhost")
    context = main._tls_context(args)  # type: ignore[arg-type]
    side.socket = context.wrap_socket(side.socket, server_side=True)
    threading.Thread(target=side.serve_forever, daemon=True).start()
    try:
        assert wait(lambda: metrics.LAST_PASS._value.get() > 0), "no maintenance pass ended"
        status, content_type, text = scrape(f"https://127.0.0.1:{side.server_address[1]}/metrics")
    finally:
        side.shutdown()
        node_agent.stop()
    assert status == 200 and content_type.startswith("text/plain")
    check_component(
        text,
        "Model manager",
        with_samples={
            "gpustack_build_info",
            "gpustack_model_manager_last_pass_timestamp_seconds",
            "gpustack_model_manager_stored_bytes",
            "gpustack_model_manager_capacity_bytes",
        },
    )
