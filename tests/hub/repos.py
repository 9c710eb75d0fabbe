"""Model repositories on disk, as the local hub serves them.

Layout under ``root``::

    objects/<sha256>           every file's bytes, content-addressed
    repos/<owner>/<name>.json  one repository: visibility, readers, refs, tags and commits
    users.json                 whoami: token SHA-256 -> user name

A commit is a full snapshot (path -> stored file); its id is a 40-hex SHA-1 over the snapshot, its
parent and message, so two different snapshots never share an id. Files are LFS by the hub's
defaults (weights suffixes, or 10 MiB and more) unless the caller says which. Writers hold a
process-wide lock and replace JSON files atomically, so a server reading them concurrently never
sees half a write.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".msgpack", ".h5", ".model")
LFS_MIN_SIZE = 10 << 20
_CHUNK = 4 << 20
_LOCK = threading.Lock()

Content = bytes | Path


def token_hash(token: str) -> str:
    """What the hub keeps of a token: its SHA-256, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def git_blob_id(data: bytes) -> str:
    """The git blob SHA-1 of ``data``: ``sha1("blob <size>\\0" + data)``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_random(path: Path, size: int, seed: int = 0) -> Path:
    """A file of ``size`` deterministic pseudo-random bytes (incompressible, like weights)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        left = size
        while left:
            n = min(left, _CHUNK)
            out.write(rng.randbytes(n))
            left -= n
    return path


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One file of a commit: its path, size, git blob id, content SHA-256 and whether it is LFS."""

    path: str
    size: int
    oid: str
    sha256: str
    lfs: bool


@dataclass(slots=True)
class RepoRecord:
    id: str
    private: bool
    gated: bool
    readers: list[str]
    refs: dict[str, str]
    tags: dict[str, str]
    commits: dict[str, dict[str, Any]]

    def commit_for(self, revision: str) -> str | None:
        """The commit a branch, tag or full commit id names, or None."""
        if revision in self.refs:
            return self.refs[revision]
        if revision in self.tags:
            return self.tags[revision]
        if revision in self.commits:
            return revision
        return None

    def files(self, commit: str) -> list[StoredFile]:
        return [StoredFile(**entry) for entry in self.commits[commit]["files"]]

    def readable_by(self, token_sha: str | None) -> bool:
        return token_sha is not None and token_sha in self.readers


class HubRepos:
    """Writes repositories under ``root`` and reads them back for the server."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)

    # --- reading --------------------------------------------------------------------------------

    def _repo_path(self, repo_id: str) -> Path:
        parts = repo_id.split("/")
        if not 1 <= len(parts) <= 2 or any(p in ("", ".", "..") or "\\" in p for p in parts):
            raise ValueError(f"not a repository id: {repo_id!r}")
        return self.root / "repos" / (repo_id + ".json")

    def load(self, repo_id: str) -> RepoRecord | None:
        try:
            path = self._repo_path(repo_id)
        except ValueError:
            return None
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        return RepoRecord(**data)

    def object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256

    def user_for(self, token_sha: str) -> str | None:
        try:
            users = json.loads((self.root / "users.json").read_text())
        except FileNotFoundError:
            return None
        return users.get(token_sha)

    # --- writing --------------------------------------------------------------------------------

    def _save(self, record: RepoRecord) -> None:
        path = self._repo_path(record.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, asdict(record))

    def create(self, repo_id: str, *, private: bool = False, gated: bool = False) -> None:
        with _LOCK:
            if self.load(repo_id) is not None:
                raise FileExistsError(repo_id)
            self._save(RepoRecord(repo_id, private, gated, [], {}, {}, {}))

    def add_user(self, token: str, name: str) -> None:
        """A token ``whoami`` accepts, as user ``name``."""
        with _LOCK:
            path = self.root / "users.json"
            users = json.loads(path.read_text()) if path.exists() else {}
            users[token_hash(token)] = name
            _write_json(path, users)

    def grant(self, repo_id: str, token: str) -> None:
        """Let ``token`` read a private or gated repository (and make it a known user)."""
        self.add_user(token, "reader-" + token_hash(token)[:8])
        with _LOCK:
            record = self._must_load(repo_id)
            if token_hash(token) not in record.readers:
                record.readers.append(token_hash(token))
            self._save(record)

    def set_visibility(self, repo_id: str, *, private: bool | None = None, gated: bool | None = None) -> None:
        with _LOCK:
            record = self._must_load(repo_id)
            if private is not None:
                record.private = private
            if gated is not None:
                record.gated = gated
            self._save(record)

    def commit(
        self,
        repo_id: str,
        files: Mapping[str, Content],
        *,
        branch: str = "main",
        lfs: Collection[str] | None = None,
        message: str = "",
        keep: bool = False,
        delete: Iterable[str] = (),
    ) -> str:
        """Commit ``files`` on ``branch`` and return the commit id.

        ``keep`` starts from the branch's current snapshot (files not named stay); ``lfs`` names the
        LFS paths (default: the hub's suffix and size rule).
        """
        stored = {path: self._store(path, content, lfs) for path, content in files.items()}
        with _LOCK:
            record = self._must_load(repo_id)
            parent = record.refs.get(branch)
            snapshot: dict[str, dict[str, Any]] = {}
            if keep and parent:
                snapshot = {f["path"]: f for f in record.commits[parent]["files"]}
            for path in delete:
                snapshot.pop(path, None)
            snapshot.update({path: asdict(f) for path, f in stored.items()})
            entries = [snapshot[p] for p in sorted(snapshot)]
            body = json.dumps({"parent": parent, "message": message, "files": entries}, sort_keys=True)
            commit = hashlib.sha1(body.encode()).hexdigest()
            record.commits[commit] = {"parent": parent, "message": message, "files": entries}
            record.refs[branch] = commit
            self._save(record)
        return commit

    def tag(self, repo_id: str, name: str, revision: str) -> str:
        with _LOCK:
            record = self._must_load(repo_id)
            commit = record.commit_for(revision)
            if commit is None:
                raise KeyError(revision)
            record.tags[name] = commit
            self._save(record)
        return commit

    def tamper(self, repo_id: str, path: str, *, revision: str = "main", offset: int = 0) -> None:
        """Change one byte of a stored file without changing what the tree says about it."""
        record = self._must_load(repo_id)
        commit = record.commit_for(revision)
        if commit is None:
            raise KeyError(revision)
        target = next(f for f in record.files(commit) if f.path == path)
        obj = self.object_path(target.sha256)
        data = bytearray(obj.read_bytes())
        data[offset] ^= 0xFF
        tmp = obj.with_suffix(".tamper")
        tmp.write_bytes(bytes(data))
        os.replace(tmp, obj)  # a fresh inode: a hard-linked source file stays as it was

    def _must_load(self, repo_id: str) -> RepoRecord:
        record = self.load(repo_id)
        if record is None:
            raise KeyError(f"no repository {repo_id}")
        return record

    def _store(self, path: str, content: Content, lfs: Collection[str] | None) -> StoredFile:
        sha256 = hashlib.sha256()
        if isinstance(content, bytes):
            size = len(content)
            sha256.update(content)
            blob = git_blob_id(content)
            source: Path | None = None
        else:
            source = Path(content)
            size = source.stat().st_size
            sha1 = hashlib.sha1(b"blob %d\0" % size)
            with open(source, "rb") as f:
                while chunk := f.read(_CHUNK):
                    sha256.update(chunk)
                    sha1.update(chunk)
            blob = sha1.hexdigest()
        digest = sha256.hexdigest()
        obj = self.object_path(digest)
        if not obj.exists():
            if source is None:
                _write_bytes(obj, content)  # type: ignore[arg-type]
            else:
                try:
                    os.link(source, obj)
                except OSError:
                    shutil.copyfile(source, obj)
        is_lfs = path in lfs if lfs is not None else (path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE)
        return StoredFile(path, size, blob, digest, is_lfs)


def _write_json(path: Path, data: Any) -> None:
    _write_bytes(path, json.dumps(data, indent=1, sort_keys=True).encode())


def _write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
