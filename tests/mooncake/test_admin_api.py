"""The operator's admin-API reader against the real Mooncake master (0.3.13.post1), and against
answers a master must never be trusted for: garbage, redirects, nothing."""

from __future__ import annotations

import http.server
import socket
from collections.abc import Iterator

import pytest

from controllers.kvcache import admin
from tests.net import serving_thread

MiB = 1024 * 1024


def test_health_metrics_and_segments(store) -> None:
    master, _ = store
    client = admin.AdminClient(master.admin_address)
    assert client.health().service_ready is True
    metrics = client.metrics()
    assert metrics.get("master_total_capacity_bytes") == 64 * MiB
    assert metrics.get("mooncake_tenant_quota_allocatable_capacity_bytes") == 64 * MiB
    (segment,) = client.segments()
    assert segment.capacity_bytes == 64 * MiB and segment.status == "OK" and segment.protocol == "tcp"
    assert segment.host == "127.0.0.1" and segment.segment_id and segment.client_id


def test_ceilings_grants_and_release(store) -> None:
    master, _ = store
    client = admin.AdminClient(master.admin_address)
    granted = client.put_quota("team-a", 48 * MiB)
    assert (granted.requested_bytes, granted.effective_bytes) == (48 * MiB, 48 * MiB)
    client.put_quota("team-b", 48 * MiB)
    quotas = client.tenant_quotas()
    # The store recuts grants in proportion when ceilings sum past what is mounted.
    assert quotas["team-a"].effective_bytes == quotas["team-b"].effective_bytes == 32 * MiB
    assert master.tenant_quotas()["team-b"]["requested_quota_bytes"] == 48 * MiB
    assert "team-a" in master.policy_file.read_text()  # the master persisted the ceiling itself
    client.delete_quota("team-b")
    client.delete_quota("team-b")  # already released: not an error
    assert client.tenant_quota("team-b") is None
    assert client.tenant_quota("team-a").effective_bytes == 48 * MiB


def test_a_tenant_holding_data_is_not_released(store) -> None:
    import mooncake

    master, _ = store
    client = admin.AdminClient(master.admin_address)
    client.put_quota("holder", 16 * MiB)
    assert mooncake.tenant_write(master, "holder", ["k0", "k1"]) == {"k0": 0, "k1": 0}
    assert client.tenant_quota("holder").charged_bytes == 2 * MiB
    with pytest.raises(admin.AdminError) as refused:
        client.delete_quota("holder")
    assert refused.value.store_error == admin.TENANT_NOT_EMPTY and refused.value.status == 409
    assert client.tenant_quota("holder") is not None
    assert mooncake.tenant_remove(master, "holder", ["k0", "k1"]) == {"k0": 0, "k1": 0}
    client.delete_quota("holder")
    assert client.tenant_quota("holder") is None


def test_unregistered_tenant_cannot_write(store) -> None:
    import mooncake

    master, _ = store
    assert mooncake.tenant_write(master, "nobody", ["k"]) != {"k": 0}


def test_bad_ceiling_is_refused_by_the_store(store) -> None:
    master, _ = store
    with pytest.raises(admin.AdminError) as refused:
        admin.AdminClient(master.admin_address).put_quota("team-z", 0)
    assert refused.value.kind == admin.REFUSED and refused.value.status == 400


def test_single_tenant_master_has_no_ledger(single_tenant) -> None:
    client = admin.AdminClient(single_tenant.admin_address)
    assert client.health().service_ready
    for call in (client.tenant_quotas, lambda: client.put_quota("a", 5), lambda: client.delete_quota("a")):
        with pytest.raises(admin.AdminError) as refused:
            call()
        assert refused.value.store_error == admin.UNAVAILABLE_IN_CURRENT_MODE and refused.value.status == 409


def test_policy_write_failure_is_reported(tmp_path) -> None:
    import shutil

    import mooncake

    from tests.mooncake.conftest import port

    state = tmp_path / "m"
    master = mooncake.Master(
        state, rpc_port=port("DOOMED_RPC"), admin_port=port("DOOMED_ADMIN"), name="doomed"
    )
    master.start()
    try:
        log = master.log_file.read_bytes()
        shutil.rmtree(state)  # the policy file's directory is gone: the master cannot persist
        with pytest.raises(admin.AdminError) as refused:
            admin.AdminClient(master.admin_address).put_quota("a", 5)
        assert refused.value.store_error == admin.PERSISTENT_FAIL
        assert log
    finally:
        master.stop()


# --- a master that answers wrongly ------------------------------------------------------------------
class _Wrong(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, dict[str, str], bytes] = (200, {}, b"")

    def do_GET(self) -> None:
        status, headers, body = self.answer
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def wrong() -> Iterator[tuple[http.server.HTTPServer, type[_Wrong]]]:
    handler = type("Handler", (_Wrong,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = serving_thread(server)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ((302, {"Location": "http://elsewhere/health"}, b""), admin.REDIRECTED),
        ((200, {}, b"<html>not json</html>"), admin.GARBAGE),
        ((200, {}, b'{"status":"ok"}'), admin.GARBAGE),
        ((500, {}, b"boom"), admin.REFUSED),
    ],
)
def test_wrong_answers(wrong, answer, kind) -> None:
    server, handler = wrong
    handler.answer = answer
    with pytest.raises(admin.AdminError) as failed:
        admin.AdminClient(f"127.0.0.1:{server.server_port}").health()
    assert failed.value.kind == kind


def test_garbage_metrics(wrong) -> None:
    server, handler = wrong
    handler.answer = (200, {}, b"master_total_capacity_bytes lots\n")
    with pytest.raises(admin.AdminError) as failed:
        admin.AdminClient(f"127.0.0.1:{server.server_port}").metrics()
    assert failed.value.kind == admin.GARBAGE


def test_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(admin.AdminError) as failed:
        admin.AdminClient(f"127.0.0.1:{free}", timeout=1).health()
    assert failed.value.kind == admin.UNREACHABLE
    with pytest.raises(admin.AdminError) as failed:
        admin.AdminClient("no-port").health()
    assert failed.value.kind == admin.UNREACHABLE
