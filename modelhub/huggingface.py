"""Hugging Face resolution with ``huggingface_hub`` (model-delivery spec §4.1, §4.2, §4.5 step 1).

- :func:`resolve_commit`: ``GET /api/models/{repo}/revision/{rev}`` → the 40-hex commit;
- :func:`list_files`: ``GET /api/models/{repo}/tree/{commit}?recursive=true``, every page;
- :func:`manifest_of`: the selected files as a :class:`~api.manifest.Manifest`;
- :func:`resolve`: the three in order, as the controller runs them once per artifact;
- :func:`token_accepted`: ``GET /api/whoami-v2``;
- :func:`confirm_access`: one ``HEAD /api/models/{repo}/resolve/{commit}/{file}``, redirects not
  followed — the revalidation probe.

A token is passed per call (``False`` when the artifact has none, so no token of the process's own
environment is ever sent). Every failure is raised as a classified :class:`HubError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from api import delivery as d
from api.manifest import Manifest, ManifestError, ManifestFile, selected
from modelhub import session
from modelhub.connection import HubConnection
from modelhub.errors import NOT_ACCESSIBLE, HubError, classify, from_status

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MASKED = re.compile(r"^\*+$")


@dataclass(frozen=True, slots=True)
class TreeFile:
    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None


@dataclass(frozen=True, slots=True)
class Resolution:
    commit: str
    manifest: Manifest


def _api(connection: HubConnection) -> HfApi:
    session.use(connection)
    return HfApi(endpoint=connection.base, library_name="gpustack-operator")


def resolve_commit(connection: HubConnection, repository: str, revision: str, token: str | None) -> str:
    what = f"repository {repository} at revision {revision}"
    try:
        info = _api(connection).model_info(repository, revision=revision, token=token or False)
    except Exception as error:
        raise classify(error, what) from None
    commit = info.sha
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise HubError(d.SOURCE_UNAVAILABLE, f"{what}: the hub answered no 40-hex commit id")
    return commit


def list_files(connection: HubConnection, repository: str, commit: str, token: str | None) -> list[TreeFile]:
    what = f"the file list of repository {repository} at {commit}"
    files: list[TreeFile] = []
    try:
        for entry in _api(connection).list_repo_tree(
            repository, recursive=True, revision=commit, token=token or False
        ):
            if not isinstance(entry, RepoFile):
                continue  # a directory
            lfs = entry.lfs.sha256 if entry.lfs is not None else None
            files.append(TreeFile(entry.path, entry.size, entry.blob_id, lfs))
    except Exception as error:
        raise classify(error, what) from None
    return files


def manifest_of(
    files: Sequence[TreeFile], allow: Sequence[str] | None, ignore: Sequence[str] | None, repository: str
) -> Manifest:
    """The selected files' manifest. A masked LFS hash is a refusal (``AccessDenied``); a file that
    cannot be a manifest line fails the whole resolution (``InvalidManifest``); nothing selected is
    ``EmptyManifest``."""
    entries = []
    for f in files:
        if not selected(f.path, allow, ignore):
            continue
        if f.lfs_sha256 is not None and _MASKED.fullmatch(f.lfs_sha256):
            raise HubError(
                d.ACCESS_DENIED, f"repository {repository} {NOT_ACCESSIBLE} (its file hashes are masked)"
            )
        if f.lfs_sha256 is not None:
            entries.append(ManifestFile(f.path, f.size, "sha256", f.lfs_sha256))
        else:
            entries.append(ManifestFile(f.path, f.size, "gitsha1", f.blob_id))
    if not entries:
        raise HubError(d.EMPTY_MANIFEST, f"no file of repository {repository} is selected by the patterns")
    try:
        return Manifest.of(entries)
    except ManifestError as error:
        raise HubError(d.INVALID_MANIFEST, f"repository {repository}: {error}") from None


def resolve(
    connection: HubConnection,
    repository: str,
    revision: str,
    token: str | None,
    allow: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
) -> Resolution:
    commit = resolve_commit(connection, repository, revision, token)
    files = list_files(connection, repository, commit, token)
    return Resolution(commit, manifest_of(files, allow, ignore, repository))


def token_accepted(connection: HubConnection, token: str) -> bool:
    """Whether the hub accepts ``token`` (whoami). A hub that cannot answer raises ``SourceUnavailable``."""
    try:
        _api(connection).whoami(token=token)
    except Exception as error:
        classified = classify(error, "the token check")
        if classified.status in (401, 403):
            return False
        raise classified from None
    return True


def confirm_access(
    connection: HubConnection, repository: str, commit: str, path: str, token: str | None
) -> None:
    """One HEAD of a file at the pinned commit, redirects not followed: 2xx/3xx confirms; a refusal
    raises ``AccessDenied``/``RevisionNotFound``; an outage ``SourceUnavailable``."""
    session.use(connection)
    headers = build_hf_headers(token=token or False, library_name="gpustack-operator")
    url = f"{connection.base}/api/models/{repository}/resolve/{commit}/{quote(path)}"
    what = f"repository {repository} at {commit}"
    try:
        response = get_session().head(url, headers=headers, follow_redirects=False)
        if response.status_code >= 400:
            hf_raise_for_status(response)
    except Exception as error:
        raise classify(error, what) from None
    if not 200 <= response.status_code < 400:
        raise from_status(response.status_code, response.headers.get("X-Error-Code"), what)
