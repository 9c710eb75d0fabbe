"""controllers.topology.fetch against a simulated HTTPS inventory: bearer and mTLS authentication,
the CA bundle, and the bounds — no redirects, at most 1 MiB, one timeout for the whole answer."""

from __future__ import annotations

import json

import pytest

from controllers.topology import fetch
from tests.topology_inventory import Answer, Inventory, make_pki

SNAPSHOT = json.dumps(
    {
        "apiVersion": "topology.gpustack.ai/v1alpha1",
        "revision": "r1",
        "nodes": {"a": {"topology.gpustack.ai/rack": "r"}},
    }
).encode()


@pytest.fixture(scope="module")
def pki():
    return make_pki()


@pytest.fixture
def inventory(pki, tmp_path):
    with Inventory(pki, tmp_path, token="s3cret") as server:
        server.answer = Answer(body=SNAPSHOT, headers={"Content-Type": "application/json"})
        yield server


def bearer(pki, token: str = "s3cret") -> fetch.Credentials:
    return fetch.Credentials(token=token, ca_bundle=pki.ca)


def test_a_bearer_read_returns_the_snapshot(pki, inventory) -> None:
    assert fetch.fetch(inventory.url + "?site=a", bearer(pki), timeout=5) == SNAPSHOT
    (request,) = inventory.requests
    assert request["Authorization"] == "Bearer s3cret" and request["path"] == "/snapshot?site=a"


def test_the_server_must_chain_to_the_bundle(pki, inventory) -> None:
    other = make_pki()
    with pytest.raises(fetch.FetchError, match=r"TLS|certificate"):
        fetch.fetch(inventory.url, fetch.Credentials(token="s3cret", ca_bundle=other.ca), timeout=5)
    with pytest.raises(fetch.FetchError, match=r"TLS|certificate"):  # the system store does not know it
        fetch.fetch(inventory.url, fetch.Credentials(token="s3cret"), timeout=5)


def test_a_wrong_token_is_a_failed_read(pki, inventory) -> None:
    with pytest.raises(fetch.FetchError, match="401"):
        fetch.fetch(inventory.url, bearer(pki, "guess"), timeout=5)


def test_a_client_certificate(pki, tmp_path) -> None:
    with Inventory(pki, tmp_path, require_client_cert=True) as server:
        server.answer = Answer(body=SNAPSHOT)
        mtls = fetch.Credentials(certificate=pki.client_cert, key=pki.client_key, ca_bundle=pki.ca)
        assert fetch.fetch(server.url, mtls, timeout=5) == SNAPSHOT
        assert "Authorization" not in server.requests[0]
        with pytest.raises(fetch.FetchError):
            fetch.fetch(server.url, fetch.Credentials(ca_bundle=pki.ca), timeout=5)


def test_a_redirect_is_not_followed(pki, inventory) -> None:
    inventory.answer = Answer(status=302, headers={"Location": "https://elsewhere.example/steal"})
    with pytest.raises(fetch.FetchError, match="redirect") as caught:
        fetch.fetch(inventory.url, bearer(pki), timeout=5)
    assert "elsewhere.example" in str(caught.value)
    assert len(inventory.requests) == 1  # nothing went to the Location


def test_ten_mebibytes_are_refused_not_read_whole(pki, inventory) -> None:
    big = b"x" * (10 * 1024 * 1024)
    inventory.answer = Answer(body=big)
    with pytest.raises(fetch.FetchError, match="at most"):
        fetch.fetch(inventory.url, bearer(pki), timeout=10)
    # Without a Content-Length (a body that just keeps coming) the read stops at the bound too.
    inventory.answer = Answer(
        body=big[: 2 * 1024 * 1024], headers={"Content-Length": "", "Connection": "close"}
    )
    with pytest.raises(fetch.FetchError, match="exceeds"):
        fetch.fetch(inventory.url, bearer(pki), timeout=10)
    # The bound is the caller's: with a larger one the same answer is read whole.
    assert len(fetch.fetch(inventory.url, bearer(pki), timeout=10, max_bytes=len(big))) == 2 * 1024 * 1024


def test_no_answer_or_a_slow_drip_is_bounded_by_the_timeout(pki, inventory) -> None:
    inventory.answer = Answer(hang=True)
    with pytest.raises(fetch.FetchError, match="within"):
        fetch.fetch(inventory.url, bearer(pki), timeout=0.5)
    inventory.answer = Answer(body=SNAPSHOT, drip=0.2)  # each byte in time, the whole never
    with pytest.raises(fetch.FetchError, match="within"):
        fetch.fetch(inventory.url, bearer(pki), timeout=0.8)


def test_nothing_listening_and_not_https(pki) -> None:
    with pytest.raises(fetch.FetchError):
        fetch.fetch("https://127.0.0.1:9/snapshot", bearer(pki), timeout=2)
    with pytest.raises(fetch.FetchError, match="https"):
        fetch.fetch("http://127.0.0.1/snapshot", bearer(pki), timeout=2)
