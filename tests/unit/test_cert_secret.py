"""The serving certificate the worker manages in a Secret: issued once by whichever replica comes
first, rotated before expiry under the same CA, and written into every replica's directory."""

from __future__ import annotations

import base64
import datetime as dt
import threading

from certs import issue, secret
from kube.client import Client
from tests.kube_fake import FakeApiServer

NS = "gpustack-system"
NAME = "gpustack-operator-worker-certs"
DNS = issue.service_names("gpustack-operator-worker", NS)


def _client() -> tuple[FakeApiServer, Client]:
    server = FakeApiServer()
    return server, Client(server)  # type: ignore[arg-type]


def _data(obj: dict, key: str) -> bytes:
    return base64.b64decode(obj["data"][key])


def test_plan_issues_keeps_and_rotates() -> None:
    assert secret.plan(None, DNS, []) == "issue"
    fresh = secret.render(NAME, NS, None, "issue", DNS, ["127.0.0.1"])
    assert secret.plan(fresh, DNS, ["127.0.0.1"]) == "keep"
    assert secret.plan(fresh, DNS, ["127.0.0.1"], rotate_before=dt.timedelta(days=400)) == "rotate"
    assert secret.plan(fresh, DNS, ["127.0.0.1"], rotate_before=dt.timedelta(days=4000)) == "issue"
    short = secret.render(NAME, NS, fresh, "rotate", DNS, [], validity=dt.timedelta(days=10))
    assert secret.plan(short, DNS, []) == "rotate"  # expires within the default 30 days
    assert secret.plan(fresh, [*DNS, "extra.example.com"], []) == "rotate"  # a name is missing


def test_rotation_keeps_the_ca_and_every_name() -> None:
    fresh = secret.render(NAME, NS, None, "issue", DNS, ["127.0.0.1"])
    rotated = secret.render(NAME, NS, fresh, "rotate", ["extra.example.com"], [])
    assert _data(rotated, "ca.crt") == _data(fresh, "ca.crt")
    assert _data(rotated, "tls.crt") != _data(fresh, "tls.crt")
    dns, ips = issue.sans_of_pem(_data(rotated, "tls.crt"))
    assert set(DNS) | {"extra.example.com"} <= dns and ips == {"127.0.0.1"}


def test_two_replicas_issue_one_certificate() -> None:
    server, client = _client()
    pairs: list[secret.Pair] = []

    def replica() -> None:
        pair, _ = secret.ensure(client, NAME, NS, DNS, [])
        pairs.append(pair)

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(pairs) == 2 and pairs[0] == pairs[1]
    creates = [p for m, p in server.requests if m == "POST"]
    assert 1 <= len(creates) <= 2  # a loser's create answered 409, then it read the winner's


def test_keeper_writes_the_pair_and_reports_a_new_ca(tmp_path) -> None:
    _, client = _client()
    seen: list[bytes] = []
    keeper = secret.Keeper(
        client, tmp_path, name=NAME, namespace=NS, dns_names=DNS, ips=[], on_ca=seen.append
    )
    keeper.check()
    first = (tmp_path / "tls.crt").read_bytes()
    assert first and (tmp_path / "tls.key").is_file() and keeper.ca == (tmp_path / "ca.crt").read_bytes()
    keeper.check()
    assert (tmp_path / "tls.crt").read_bytes() == first and seen == []  # nothing changed, nothing written
    client.delete("Secret", NAME, NS)  # an administrator removes it: a new CA and pair
    keeper.check()
    assert (tmp_path / "tls.crt").read_bytes() != first and seen == [keeper.ca]


def test_a_peer_rotation_reaches_this_replica(tmp_path) -> None:
    _, client = _client()
    mine = secret.Keeper(client, tmp_path / "a", name=NAME, namespace=NS, dns_names=DNS, ips=[])
    mine.check()
    stored = client.get("Secret", NAME, NS)
    client.update(secret.render(NAME, NS, stored, "rotate", DNS, []))  # the peer rotated
    mine.check()
    assert (tmp_path / "a" / "tls.crt").read_bytes() == _data(client.get("Secret", NAME, NS), "tls.crt")
