"""``/metrics`` behind TokenReview + SubjectAccessReview (``worker --metrics-auth``), as Kueue's:
no token or an unknown one 401, a user without ``get /metrics`` 403, a reader 200; decisions
cached briefly, an apiserver that cannot answer a 503 that is not cached."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from gpustack_operator import serving, worker_flags
from kube.client import Client
from kube.metrics_auth import MetricsAuthorizer, bearer
from tests.net import serve_tls
from tests.unit.metrics_fixtures import ReviewingApiServer, scrape
from webhooks import server
from webhooks.lookups import FileLookups

READER: dict[str, Any] = {
    "username": "system:serviceaccount:monitoring:prometheus",
    "uid": "u-1",
    "groups": ["g"],
}
STRANGER: dict[str, Any] = {"username": "system:serviceaccount:team-a:builder", "extra": {"scopes": ["a"]}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def apiserver() -> ReviewingApiServer:
    fake = ReviewingApiServer()
    fake.tokens = {"reader-token": READER, "stranger-token": STRANGER}
    fake.readers = {READER["username"]}
    return fake


def authorizer(apiserver: ReviewingApiServer, clock: Clock | None = None) -> MetricsAuthorizer:
    return MetricsAuthorizer(Client(apiserver), clock=clock or Clock())  # type: ignore[arg-type]


def test_bearer_reads_only_a_bearer_header() -> None:
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer(None) == bearer("") == bearer("Basic abc") == bearer("Bearer ") == ""


def test_verdicts_and_what_the_reviews_carry(apiserver: ReviewingApiServer) -> None:
    auth = authorizer(apiserver)
    assert auth.check(None).status == 401 and apiserver.reviews == []  # no token: nothing asked
    assert auth.check("Bearer nobody").status == 401
    refused = auth.check("Bearer stranger-token")
    assert refused.status == 403 and STRANGER["username"] in refused.message
    assert auth.check("Bearer reader-token").status == 200
    token_review, access_review = apiserver.reviews[-2:]
    assert token_review["spec"] == {"token": "reader-token"}
    assert access_review["spec"] == {
        "user": READER["username"],
        "uid": "u-1",
        "groups": ["g"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    stranger_access = apiserver.reviews[2]  # after the unknown token's and the stranger's TokenReviews
    assert stranger_access["kind"] == "SubjectAccessReview"
    assert stranger_access["spec"]["extra"] == {"scopes": ["a"]}


def test_decisions_are_cached_briefly_refusals_shorter(apiserver: ReviewingApiServer) -> None:
    clock = Clock()
    auth = authorizer(apiserver, clock)
    for _ in range(3):
        assert auth.check("Bearer reader-token").allowed
        assert auth.check("Bearer stranger-token").status == 403
    assert auth.reviews == 2
    clock.now += 11  # a refusal is asked again after 10 s, an allowance kept for 60 s
    assert auth.check("Bearer stranger-token").status == 403 and auth.check("Bearer reader-token").allowed
    assert auth.reviews == 3
    apiserver.readers.clear()  # the binding is removed: the reader learns it once its entry expires
    clock.now += 50
    assert auth.check("Bearer reader-token").status == 403 and auth.reviews == 4


def test_an_apiserver_that_cannot_answer_is_a_503_not_cached(apiserver: ReviewingApiServer) -> None:
    auth = authorizer(apiserver)
    apiserver.unavailable = 1
    down = auth.check("Bearer reader-token")
    assert down.status == 503 and "500" in down.message
    assert auth.check("Bearer reader-token").status == 200  # asked again, not the cached 503


def test_the_worker_endpoint_over_https(apiserver: ReviewingApiServer, tmp_path) -> None:
    """The real app and server: 401, 403, 200; the other endpoints stay open to the kubelet."""
    auth = authorizer(apiserver)
    app = server.create_app(FileLookups(), webhooks=(), metrics_auth=auth)
    with serve_tls(app, tmp_path) as url:
        ca = tmp_path / "ca.crt"
        status, _, body = scrape(f"{url}/metrics", ca=ca)
        assert status == 401 and "bearer token" in body
        assert scrape(f"{url}/metrics", token="made-up", ca=ca)[0] == 401
        status, _, body = scrape(f"{url}/metrics", token="stranger-token", ca=ca)
        assert status == 403 and "may not get /metrics" in body
        status, content_type, body = scrape(f"{url}/metrics", token="reader-token", ca=ca)
        assert status == 200 and content_type.startswith("text/plain") and "gpustack_build_info{" in body
        assert scrape(f"{url}/readyz", ca=ca)[0] == 200 and scrape(f"{url}/livez", ca=ca)[0] == 200
    assert auth.reviews == 3


def test_without_the_flag_metrics_are_open(tmp_path) -> None:
    with serve_tls(server.create_app(FileLookups(), webhooks=()), tmp_path) as url:
        assert scrape(f"{url}/metrics", ca=tmp_path / "ca.crt")[0] == 200


def test_the_flag_and_its_spellings() -> None:
    parser = argparse.ArgumentParser()
    worker_flags.add_arguments(parser)
    assert parser.parse_args([]).metrics_auth is False
    assert parser.parse_args(["--metrics-auth"]).metrics_auth is True
    assert parser.parse_args(["--metrics-auth=true"]).metrics_auth is True
    assert parser.parse_args(["--metrics-auth=false"]).metrics_auth is False
    assert serving.metrics_authorizer(False, None) is None


def test_the_flag_needs_a_cluster(tmp_path, capsys) -> None:
    parser = argparse.ArgumentParser()
    worker_flags.add_arguments(parser)
    args = parser.parse_args(["--objects", str(tmp_path), "--webhooks-only", "--insecure", "--metrics-auth"])
    assert serving.run_files(args) == 2
    assert "--metrics-auth" in capsys.readouterr().err
