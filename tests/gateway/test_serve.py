"""Running the gateway: the command line, its checks, the unix socket and TCP listeners, TLS, and
the loopback and kubeconfig-directory connection modes."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509

from certs import issue
from gateway.serve import prepare
from gpustack_operator import cli
from tests.gateway.fake_apiserver import FakeUpstream
from tests.gateway.serving import FAST, Running, options, serve_unix
from tests.net import free_port, served_serial
from tests.unit.gateway_objects import instance_type


@pytest.fixture
def upstream():
    server = FakeUpstream().start()
    server.cluster("a").put(instance_type("t"))
    yield server
    server.stop()


def wait_registered(client: httpx.Client, cluster: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        items = client.get("/apis/workers").json()["items"]
        if any(w["cluster"] == cluster and w["state"] == "registered" for w in items):
            return
        time.sleep(0.05)
    raise AssertionError(f"{cluster} did not register: {items}")


# The command line -----------------------------------------------------------------------------


def test_the_subcommand_and_its_alias_parse_the_reference_flags():
    for command in ("worker-gateway", "wg"):
        args = cli.parser().parse_args(
            [command, "--worker-conn-gpustack-api-port", "8080", "--bind-unix-path", "/tmp/x.sock", "--v=4"]
        )
        assert args.func.__name__ == "_worker_gateway"
    opts = options(
        "--worker-readiness-check-timeout", "1m30s", "--informer-cache-resync-period", "2h", "--v=4"
    )
    assert (opts.readiness_timeout, opts.resync, opts.verbosity) == (90.0, 7200.0, 4)
    assert (opts.mode, opts.gpustack_api_port, opts.conn_timeout, opts.qps, opts.burst) == (
        "gpustack-api",
        30080,
        300.0,
        200.0,
        400,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--worker-readiness-check-timeout", "500ms"], "at least 1s"),
        (["--worker-readiness-check-timeout", "10m"], "at most --kube-conn-timeout"),
        (["--kube-conn-timeout", "5s"], "at least 10s"),
        (["--informer-cache-resync-period", "1m"], "at least 5m"),
        (["--kube-conn-qps", "50", "--kube-conn-burst", "50"], "burst above"),
        (["--bind-unix-path", ""], "--secure-port"),
        (["--worker-conn-mode", "kubeconfig-dir"], "--worker-conn-kubeconfig-dir"),
        (["--watch-buffer", "0"], "--watch-buffer"),
    ],
)
def test_unusable_options_exit_2_naming_the_flag(args, says, capsys, tmp_path):
    code = cli.main(["worker-gateway", "--bind-unix-path", str(tmp_path / "s.sock"), *args])
    assert code == 2
    assert says in capsys.readouterr().err


def test_a_run_gives_the_callers_sigterm_handler_back(tmp_path):
    """In-process (as here), ``run`` must not leave its SIGTERM handler behind: a child forked
    later would raise SystemExit on SIGTERM instead of dying."""
    import signal

    mine = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert cli.main(["wg", "--bind-unix-path", str(tmp_path / "s.sock"), "--watch-buffer", "0"]) == 2
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, mine)


def test_a_bad_duration_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["wg", "--worker-readiness-check-timeout", "soon"])
    assert exited.value.code == 2
    assert "not a duration" in capsys.readouterr().err


# Listeners and TLS ----------------------------------------------------------------------------


def test_the_unix_socket_is_private_and_the_generated_certificate_goes_at_exit(tmp_path):
    path = tmp_path / "run" / "gw.sock"
    running = serve_unix(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    tls = running.served.server.config.tls
    assert tls is not None
    scratch = tls.cert_file.parent
    assert scratch.name.startswith("gpustack-gateway-tls-") and scratch.is_dir()
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(path))
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(raw, server_hostname="gpustack-operator") as tls:
            cert = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpustack-operator" in names.get_values_for_type(x509.DNSName)
    running.stop()
    assert not path.exists()
    assert not scratch.exists()


def test_a_stale_socket_is_replaced_but_a_live_one_or_a_file_is_not(tmp_path, capsys):
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(stale))  # left behind by a process that exited
    running = serve_unix(stale)
    assert running.client().get("/livez").status_code == 200
    assert cli.main(["wg", "--bind-unix-path", str(stale)]) == 2
    assert "another process serves on it" in capsys.readouterr().err
    running.stop()
    regular = tmp_path / "file.sock"
    regular.write_text("keep me")
    assert cli.main(["wg", "--bind-unix-path", str(regular)]) == 2
    assert "is not a socket" in capsys.readouterr().err
    assert regular.read_text() == "keep me"


def test_tcp_with_a_certificate_directory(tmp_path):
    cert_dir = tmp_path / "pki"
    issue.ensure(cert_dir, ["localhost"], ["127.0.0.1"])
    port = free_port()
    served = prepare(
        options("--bind-unix-path", "", "--secure-port", str(port), "--cert-dir", str(cert_dir)),
        settings=FAST,
    )
    running = Running(served, None)
    running.thread.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with httpx.Client(verify=ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))) as client:
                if client.get(f"https://127.0.0.1:{port}/readyz").status_code == 200:
                    break
        except httpx.TransportError:
            time.sleep(0.05)
    serial = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes()).serial_number
    assert served_serial(port, str(cert_dir / "ca.crt")) == serial
    running.stop()


# Connection modes -----------------------------------------------------------------------------


def kubeconfig(server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "anything"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


def test_kubeconfig_directory_mode_reads_one_kubeconfig_per_cluster(upstream, tmp_path):
    configs = tmp_path / "clusters"
    configs.mkdir()
    (configs / "east.yaml").write_text(kubeconfig(f"http://127.0.0.1:{upstream.port}/v2/clusters/a/proxy"))
    (configs / "broken").write_text("not: [a kubeconfig")
    running = serve_unix(
        tmp_path / "gw.sock",
        "--worker-conn-mode",
        "kubeconfig-dir",
        "--worker-conn-kubeconfig-dir",
        str(configs),
    )
    client = running.client()
    missing = client.post("/apis/workers", params={"cluster": "west"})
    assert missing.status_code == 404 and "west.yaml" in missing.json()["message"]
    broken = client.post("/apis/workers", params={"cluster": "broken"})
    assert broken.status_code == 400 and "not a usable kubeconfig" in broken.json()["message"]
    assert client.post("/apis/workers", params={"cluster": "east"}).status_code == 200
    wait_registered(client, "east")
    items = client.get("/apis/instancetypes").json()["items"]
    assert [(i["cluster"], i["metadata"]["name"]) for i in items] == [("east", "t")]
    running.stop()


def test_loopback_mode_answers_every_cluster_name_from_one_kubeconfig(upstream, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig(f"http://127.0.0.1:{upstream.port}/v2/clusters/a/proxy"))
    running = serve_unix(
        tmp_path / "gw.sock", "--worker-conn-mode", "loopback", "--worker-conn-kubeconfig", str(config)
    )
    client = running.client()
    for name in ("one", "two"):
        assert client.post("/apis/workers", params={"cluster": name, "token": "ignored"}).status_code == 200
    wait_registered(client, "one")
    wait_registered(client, "two")
    items = client.get("/apis/instancetypes").json()["items"]
    assert [i["cluster"] for i in items] == ["one", "two"]
    running.stop()


def test_sigterm_removes_the_socket_and_the_generated_certificate(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    path = tmp_path / "gw.sock"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpustack_operator", "wg", "--bind-unix-path", str(path)],
        env={**os.environ, "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers(path) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert _answers(path) and [p.name[:21] for p in scratch.iterdir()] == ["gpustack-gateway-tls-"]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert not path.exists()
    assert list(scratch.iterdir()) == []


def _answers(path: Path) -> bool:
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path), verify=False)) as client:
            return client.get("https://gw/livez").status_code == 200
    except httpx.TransportError:
        return False
