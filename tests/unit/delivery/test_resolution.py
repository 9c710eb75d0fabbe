"""modelhub: resolution against the local hub with huggingface_hub's client (§4.1 steps 1-5),
the revalidation probe (step 6), and the connection's proxy and CA handling."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from api import delivery as d
from certs.issue import Paths, issue_ca, issue_serving
from modelhub import huggingface as hf
from modelhub.connection import HubConnection, bypasses_proxy
from modelhub.errors import HubError, redact
from tests.hub.proxy import ForwardProxy
from tests.hub.repos import HubRepos
from tests.hub.server import Fault, HubServer
from tests.unit.delivery.conftest import OTHER_TOKEN, TOKEN


def conn(hub: HubServer, **kw: str) -> HubConnection:
    return HubConnection(hub.endpoint, **kw)


def expected_manifest(repos: HubRepos, repo: str, keep=lambda p: True) -> bytes:
    """The manifest text computed independently from what the hub stores."""
    record = repos.load(repo)
    lines = []
    for f in record.files(record.refs["main"]):
        if keep(f.path):
            lines.append(
                (f.path.encode(), f"sha256:{f.sha256}" if f.lfs else f"gitsha1:{f.oid}", f.size, f.path)
            )
    body = "".join(f"{h} {s} {p}\n" for _, h, s, p in sorted(lines))
    return ("gpustack-manifest v1\n" + body).encode()


def failure(call) -> HubError:
    with pytest.raises(HubError) as raised:
        call()
    return raised.value


def test_resolution_pins_the_commit_and_the_manifest_digest(hub: HubServer) -> None:
    resolution = hf.resolve(conn(hub), "org/public", "main", None)
    assert resolution.commit == hub.repos.load("org/public").refs["main"]
    text = expected_manifest(hub.repos, "org/public")
    assert resolution.manifest.text == text
    assert resolution.manifest.digest == "sha256:" + hashlib.sha256(text).hexdigest()
    assert len(resolution.manifest.files) == 5
    assert len(hub.log("tree")) == 2  # every page (three entries a page)


def test_patterns_select_files_and_the_digest_follows_only_the_files(hub: HubServer) -> None:
    resolution = hf.resolve(conn(hub), "org/public", "main", None, ["*.json", "tokenizer/"], ["*merges*"])
    assert [f.path for f in resolution.manifest.files] == ["config.json", "tokenizer/vocab.txt"]
    keep = {"config.json", "tokenizer/vocab.txt"}
    assert resolution.manifest.text == expected_manifest(hub.repos, "org/public", lambda p: p in keep)
    # Same files in another repository at another commit: the same digest.
    hub.repos.create("other/copy")
    record = hub.repos.load("org/public")
    files = {f.path: hub.repos.object_path(f.sha256).read_bytes() for f in record.files(record.refs["main"])}
    hub.repos.commit("other/copy", {p: files[p] for p in keep}, message="copy")
    assert hf.resolve(conn(hub), "other/copy", "main", None).manifest.digest == resolution.manifest.digest


def test_a_branch_is_followed_once_the_commit_is_what_is_kept(hub: HubServer) -> None:
    first = hf.resolve(conn(hub), "org/public", "main", None)
    hub.repos.commit("org/public", {"new.txt": b"new"}, keep=True)
    again = hf.resolve(conn(hub), "org/public", first.commit, None)
    assert again.manifest.digest == first.manifest.digest


def test_unknown_revision(hub: HubServer) -> None:
    error = failure(lambda: hf.resolve(conn(hub), "org/public", "v9", None))
    assert error.reason == d.REVISION_NOT_FOUND


@pytest.mark.parametrize("token", [None, OTHER_TOKEN])
def test_private_repository_without_a_reader_token_is_access_denied(
    hub: HubServer, token: str | None
) -> None:
    error = failure(lambda: hf.resolve(conn(hub), "org/private", "main", token))
    assert error.reason == d.ACCESS_DENIED
    assert "does not exist or is not accessible" in error.message


def test_private_repository_with_its_token_resolves(hub: HubServer) -> None:
    assert (
        hf.resolve(conn(hub), "org/private", "main", TOKEN).commit
        == hub.repos.load("org/private").refs["main"]
    )


def test_gated_repository_with_masked_hashes_is_access_denied(hub: HubServer) -> None:
    error = failure(lambda: hf.resolve(conn(hub), "org/gated", "main", None))
    assert error.reason == d.ACCESS_DENIED
    assert hf.resolve(conn(hub), "org/gated", "main", TOKEN).manifest.files


def test_no_repository_is_access_denied(hub: HubServer) -> None:
    assert failure(lambda: hf.resolve(conn(hub), "org/none", "main", None)).reason == d.ACCESS_DENIED


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", kind="revision", status=503),
        Fault("status", kind="revision", status=429),
        Fault("garbage", kind="revision"),
        Fault("reset", kind="revision"),
    ],
)
def test_outages_and_garbage_are_source_unavailable(hub: HubServer, fault: Fault) -> None:
    hub.set_faults(fault)
    assert failure(lambda: hf.resolve(conn(hub), "org/public", "main", None)).reason == d.SOURCE_UNAVAILABLE


def test_garbage_tree_is_source_unavailable(hub: HubServer) -> None:
    hub.set_faults(Fault("garbage", kind="tree"))
    assert failure(lambda: hf.resolve(conn(hub), "org/public", "main", None)).reason == d.SOURCE_UNAVAILABLE


def test_unreachable_endpoint_is_source_unavailable(tmp_path: Path) -> None:
    with HubServer(tmp_path) as hub:
        endpoint = hub.endpoint
    error = failure(lambda: hf.resolve(HubConnection(endpoint), "org/public", "main", None))
    assert error.reason == d.SOURCE_UNAVAILABLE


def test_empty_selection_is_empty_manifest(hub: HubServer) -> None:
    error = failure(lambda: hf.resolve(conn(hub), "org/public", "main", None, ["*.gguf"]))
    assert error.reason == d.EMPTY_MANIFEST


def test_a_bad_path_fails_the_whole_resolution(hub: HubServer) -> None:
    hub.repos.create("org/evil")
    hub.repos.commit("org/evil", {"config.json": b"{}", "a/../../escape": b"x"})
    error = failure(lambda: hf.resolve(conn(hub), "org/evil", "main", None))
    assert error.reason == d.INVALID_MANIFEST


def test_token_check(hub: HubServer) -> None:
    assert hf.token_accepted(conn(hub), TOKEN) is True
    assert hf.token_accepted(conn(hub), "hf_revoked") is False
    hub.set_faults(Fault("status", kind="whoami", status=502))
    assert failure(lambda: hf.token_accepted(conn(hub), TOKEN)).reason == d.SOURCE_UNAVAILABLE


def test_revalidation_probe_is_one_head_without_redirects(hub: HubServer) -> None:
    commit = hub.repos.load("org/public").refs["main"]
    hub.clear_log()
    hf.confirm_access(conn(hub), "org/public", commit, "model.safetensors", None)  # LFS: a 302
    hf.confirm_access(conn(hub), "org/public", commit, "config.json", None)
    assert [(e["method"], e["kind"]) for e in hub.log()] == [("HEAD", "resolve"), ("HEAD", "resolve")]
    assert all(e["path"].startswith("/api/models/org/public/resolve/") for e in hub.log())


def test_revalidation_refusal_and_outage(hub: HubServer) -> None:
    commit = hub.repos.load("org/private").refs["main"]
    hf.confirm_access(conn(hub), "org/private", commit, "config.json", TOKEN)
    error = failure(lambda: hf.confirm_access(conn(hub), "org/private", commit, "config.json", OTHER_TOKEN))
    assert error.reason == d.ACCESS_DENIED
    hub.set_faults(Fault("status", kind="resolve", status=503))
    error = failure(lambda: hf.confirm_access(conn(hub), "org/private", commit, "config.json", TOKEN))
    assert error.reason == d.SOURCE_UNAVAILABLE


def test_requests_go_through_the_proxy_unless_the_host_is_bypassed(hub: HubServer) -> None:
    with ForwardProxy() as proxy:
        hf.resolve(conn(hub, https_proxy=proxy.url), "org/public", "main", None)
        assert {target for _, target in proxy.requests} == {f"127.0.0.1:{hub.port}"}
        count = len(proxy.requests)
        hf.resolve(
            conn(hub, https_proxy=proxy.url, no_proxy="10.0.0.0/8,127.0.0.1"), "org/public", "main", None
        )
        assert len(proxy.requests) == count


def test_https_hub_needs_its_ca(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "pki")
    paths.directory.mkdir()
    issue_ca(paths)
    issue_serving(paths, ["localhost"], ["127.0.0.1"])
    with HubServer(tmp_path / "hub", tls=(str(paths.cert), str(paths.key))) as hub:
        hub.repos.create("org/tls")
        hub.repos.commit("org/tls", {"config.json": b"{}"})
        error = failure(lambda: hf.resolve(HubConnection(hub.endpoint), "org/tls", "main", None))
        assert error.reason == d.SOURCE_UNAVAILABLE
        trusted = HubConnection(hub.endpoint, ca_pem=paths.ca_cert.read_text())
        assert hf.resolve(trusted, "org/tls", "main", None).manifest.files


def test_connection_problems_name_the_part() -> None:
    assert HubConnection("https://huggingface.co").problem() is None
    assert "endpoint" in HubConnection("huggingface.co").problem()
    assert "endpoint" in HubConnection("").problem()
    assert "proxy" in HubConnection("https://h", https_proxy="http://u:p@proxy:3128").problem()
    assert "proxy" in HubConnection("https://h", https_proxy="socks5://proxy").problem()
    assert "no-proxy" in HubConnection("https://h", no_proxy="a b").problem()
    assert "CA" in HubConnection("https://h", ca_pem="not a certificate").problem()


def test_no_proxy_matching() -> None:
    assert bypasses_proxy("hub.example.com", ".example.com")
    assert bypasses_proxy("example.com", "example.com")
    assert bypasses_proxy("a.example.com", "example.com")
    assert not bypasses_proxy("badexample.com", "example.com")
    assert bypasses_proxy("10.1.2.3", "10.0.0.0/8")
    assert not bypasses_proxy("11.1.2.3", "10.0.0.0/8")
    assert bypasses_proxy("anything", "*")
    assert bypasses_proxy("hub", "hub:443")
    assert not bypasses_proxy("hub", "")


def test_redact_removes_signatures_and_tokens() -> None:
    text = "GET https://cdn/x?X-Amz-Signature=abc&Expires=1 with Bearer hf_abcdefghijkl"
    cleaned = redact(text)
    assert "abc" not in cleaned and "hf_abcdefghijkl" not in cleaned
    assert "https://cdn/x" in cleaned
