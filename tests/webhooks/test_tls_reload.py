"""The served certificate is reloaded from disk when ``certs`` rotates it, without a restart."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from certs import issue, tls
from tests.net import serve_tls, served_serial
from webhooks import server
from webhooks.lookups import FileLookups


@pytest.fixture
def running(tmp_path, monkeypatch):
    monkeypatch.setattr(tls, "WATCH_INTERVAL", 0.2)
    with serve_tls(server.create_app(FileLookups(), webhooks=()), tmp_path) as url:
        yield tmp_path, int(url.rsplit(":", 1)[1])


def test_rotated_certificate_is_served_without_restart(running):
    directory, port = running
    ca = str(directory / "ca.crt")
    first = served_serial(port, ca)
    rotated = issue.issue_serving(issue.Paths(directory), ["localhost"], ["127.0.0.1"])
    deadline = time.monotonic() + 10
    while served_serial(port, ca) == first and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served_serial(port, ca) == rotated.serial_number


def test_ensure_rotates_only_when_due(tmp_path):
    assert issue.ensure(tmp_path, ["a.svc"], ["127.0.0.1"]) == "issued CA, issued serving certificate"
    assert issue.ensure(tmp_path, ["a.svc"], ["127.0.0.1"]) == "certificates valid"
    # The serving pair (1 year) expires within 400 days: re-issued under the same CA (10 years),
    # so the caBundle the apiserver holds stays valid through the rotation.
    ca_before = (tmp_path / "ca.crt").read_bytes()
    serving_before = (tmp_path / "tls.crt").read_bytes()
    rotate = dt.timedelta(days=400)
    assert (
        issue.ensure(tmp_path, ["a.svc"], ["127.0.0.1"], rotate_before=rotate) == "issued serving certificate"
    )
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    assert (tmp_path / "tls.crt").read_bytes() != serving_before
    # Changed SANs re-issue too.
    assert issue.ensure(tmp_path, ["b.svc"], ["127.0.0.1"]) == "issued serving certificate"
    assert issue.sans_of(tmp_path / "tls.crt") == ({"b.svc"}, {"127.0.0.1"})
