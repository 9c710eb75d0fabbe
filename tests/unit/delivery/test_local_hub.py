"""The local hub speaks the Hub API huggingface_hub's own client code expects, unchanged, through a
configurable endpoint: revision info, paged recursive trees, resolve with redirects and ranges,
whoami, private and gated repositories, and the request log and faults tests rely on."""

from __future__ import annotations

import hashlib
import http.client
import urllib.request
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.hub.control import HubControl
from tests.hub.repos import git_blob_id
from tests.hub.server import Fault, HubServer
from tests.unit.delivery.conftest import OTHER_TOKEN, TOKEN


def api(hub: HubServer) -> HfApi:
    return HfApi(endpoint=hub.endpoint)


def test_revision_resolves_branch_tag_and_commit_to_the_same_40_hex_commit(hub: HubServer) -> None:
    commit = hub.repos.load("org/public").refs["main"]
    hub.repos.tag("org/public", "v1.0", "main")
    assert len(commit) == 40 and int(commit, 16) >= 0
    for revision in ("main", "v1.0", commit):
        assert api(hub).model_info("org/public", revision=revision, token=False).sha == commit
    newer = hub.repos.commit("org/public", {"extra.txt": b"x"}, keep=True)
    assert api(hub).model_info("org/public", revision="main", token=False).sha == newer
    assert api(hub).model_info("org/public", revision="v1.0", token=False).sha == commit


def test_unknown_revision_is_revision_not_found(hub: HubServer) -> None:
    with pytest.raises(RevisionNotFoundError) as raised:
        api(hub).model_info("org/public", revision="no-such-branch", token=False)
    assert raised.value.response.status_code == 404
    assert raised.value.response.headers["X-Error-Code"] == "RevisionNotFound"


def test_recursive_tree_follows_every_page(hub: HubServer) -> None:
    hub.clear_log()
    entries = list(api(hub).list_repo_tree("org/public", recursive=True, revision="main", token=False))
    files = {e.path: e for e in entries if hasattr(e, "blob_id")}
    assert sorted(files) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer/merges.txt",
        "tokenizer/vocab.txt",
    ]
    assert [e.path for e in entries if not hasattr(e, "blob_id")] == ["tokenizer"]
    assert len(hub.log("tree")) == 2  # six entries, three a page
    assert files["config.json"].blob_id == git_blob_id(b'{"hidden_size": 64}\n')
    assert files["config.json"].lfs is None


def test_tree_carries_the_lfs_sha256(hub: HubServer, large_file: Path) -> None:
    entries = api(hub).list_repo_tree("org/public", recursive=True, token=False)
    weights = next(e for e in entries if e.path == "model.safetensors")
    assert weights.lfs.sha256 == hashlib.sha256(large_file.read_bytes()).hexdigest()
    assert weights.size == large_file.stat().st_size


def test_hf_hub_download_follows_the_lfs_redirect_without_forwarding_the_token(
    hub: HubServer, large_file: Path, tmp_path: Path
) -> None:
    hub.repos.grant("org/public", TOKEN)
    hub.clear_log()
    path = hf_hub_download(
        "org/public", "model.safetensors", endpoint=hub.endpoint, cache_dir=tmp_path / "c", token=TOKEN
    )
    assert Path(path).read_bytes() == large_file.read_bytes()
    cdn = hub.log("cdn")
    assert cdn and all(e["host"].startswith("localhost:") and e["auth"] == "none" for e in cdn)
    assert all(e["auth"] == "known" for e in hub.log("resolve"))
    small = hf_hub_download(
        "org/public", "tokenizer/vocab.txt", endpoint=hub.endpoint, cache_dir=tmp_path / "c"
    )
    assert Path(small).read_bytes() == b"a\nb\nc\n"


def test_resolve_honours_a_range(hub: HubServer, large_file: Path) -> None:
    request = urllib.request.Request(hub.url("org/public", "config.json"), headers={"Range": "bytes=2-7"})
    with urllib.request.urlopen(request) as response:
        assert response.status == 206
        assert response.headers["Content-Range"] == "bytes 2-7/20"
        assert response.read() == b'{"hidden_size": 64}\n'[2:8]


def test_whoami_knows_tokens_and_refuses_others(hub: HubServer) -> None:
    assert api(hub).whoami(token=OTHER_TOKEN)["name"] == "someone"
    with pytest.raises(HfHubHTTPError) as raised:
        api(hub).whoami(token="hf_not_a_token")
    assert raised.value.response.status_code == 401


def test_private_repository_needs_a_reader_token(hub: HubServer) -> None:
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        api(hub).model_info("org/private", token=False)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as stranger:
        api(hub).model_info("org/private", token=OTHER_TOKEN)
    assert stranger.value.response.status_code == 404
    assert api(hub).model_info("org/private", token=TOKEN).sha == hub.repos.load("org/private").refs["main"]


def test_gated_repository_masks_lfs_oids_and_refuses_downloads(hub: HubServer, tmp_path: Path) -> None:
    entries = list(api(hub).list_repo_tree("org/gated", recursive=True, token=False))
    weights = next(e for e in entries if e.path == "model.safetensors")
    assert weights.lfs.sha256 == "*" * 64
    with pytest.raises(GatedRepoError):
        hf_hub_download(
            "org/gated", "model.safetensors", endpoint=hub.endpoint, cache_dir=tmp_path, token=False
        )
    granted = list(api(hub).list_repo_tree("org/gated", recursive=True, token=TOKEN))
    assert next(e for e in granted if e.path == "model.safetensors").lfs.sha256 != "*" * 64


def test_faults_and_the_log_through_the_control_routes(hub: HubServer) -> None:
    control = HubControl(hub.endpoint)
    control.set_faults(Fault("status", kind="revision", status=503, times=1))
    with pytest.raises(HfHubHTTPError) as raised:
        api(hub).model_info("org/public", token=False)
    assert raised.value.response.status_code == 503
    assert api(hub).model_info("org/public", token=False).sha  # the fault hit once
    revisions = control.log("revision")
    assert [e["status"] for e in revisions[-2:]] == [503, 200]
    control.clear_log()
    assert control.log() == []


def test_truncated_body_closes_early(hub: HubServer) -> None:
    hub.set_faults(Fault("truncate", kind="resolve", after=5))
    with (
        urllib.request.urlopen(hub.url("org/public", "config.json")) as response,
        pytest.raises(http.client.IncompleteRead) as raised,
    ):
        response.read()
    assert raised.value.partial == b'{"hid'
    assert hub.log("resolve")[-1]["sent"] == 5


def test_signed_urls_never_reach_the_log(hub: HubServer, tmp_path: Path) -> None:
    hf_hub_download("org/public", "model.safetensors", endpoint=hub.endpoint, cache_dir=tmp_path)
    assert all("Signature" not in e["path"] for e in hub.log())
    assert not any("?" in e["path"] for e in hub.log())
