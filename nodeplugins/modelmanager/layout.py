"""The cache's on-disk layout (spec §8 leaves it to the implementation; this is the choice).

Under the cache root (chart ``modelManager.rootPath``, ``/var/lib/gpustack/models``)::

    v1/trees/<hex>/            a published digest
        .gpustack-tree           the marker: "sha256:<hex>\\n", written and synced last
        manifest                 the manifest text (§4.2), which peers serve as the tree's listing
        source                   "Hub" or "Peer": where most of its bytes came from (absent on older trees)
        model/                   the files; this directory is what Pods mount
    v1/partial/<hex>/          a digest being (or once) materialized
        manifest
        model/                   files written in byte order, each a verified prefix
        state/<sha1(path)>.json  per-file checkpoint: offset, saved hash state, done
    v1/scratch/                trees being removed (renamed here first, then deleted)
    v1/ledger.json             references, last use, failures and asks (see ledger): the snapshot
    v1/ledger.journal          one line per change since the snapshot

Publication syncs every file, writes the manifest and the marker, syncs them, removes ``state/``
and renames ``partial/<hex>`` to ``trees/<hex>`` in one step; a tree is mounted only when its marker
names its digest. Removal renames a tree out of ``trees/`` first, so no half-deleted tree is ever
found there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

from api.manifest import DIGEST_PATTERN, Manifest

MARKER = ".gpustack-tree"
SOURCE = "source"


class LayoutError(ValueError):
    pass


def hex_of(digest: str) -> str:
    if not DIGEST_PATTERN.fullmatch(digest):
        raise LayoutError(f"not a manifest digest: {digest!r}")
    return digest[len("sha256:") :]


_HEX_NAME = re.compile(r"^[0-9a-f]{64}$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Layout:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.base = self.root / "v1"
        self.trees = self.base / "trees"
        self._trees = str(self.trees)
        self.partials = self.base / "partial"
        self.scratch = self.base / "scratch"
        self.ledger = self.base / "ledger.json"

    def ensure(self) -> None:
        for path in (self.trees, self.partials, self.scratch):
            path.mkdir(parents=True, exist_ok=True)

    # --- published trees ------------------------------------------------------------------------------

    def tree(self, digest: str) -> Path:
        return self.trees / hex_of(digest)

    def tree_model(self, digest: str) -> Path:
        return self.tree(digest) / "model"

    def published(self, digest: str) -> bool:
        """One open and one small read: the marker names this digest."""
        try:
            with open(f"{self._trees}/{hex_of(digest)}/{MARKER}", "rb") as f:
                return f.read(80) == digest.encode() + b"\n"
        except (OSError, LayoutError):
            return False

    def published_digests(self) -> list[str]:
        out = []
        for entry in _listdir(self.trees):
            if _HEX_NAME.fullmatch(entry) and self.published("sha256:" + entry):
                out.append("sha256:" + entry)
        return sorted(out)

    def tree_manifest(self, digest: str) -> Manifest | None:
        try:
            return Manifest.parse((self.tree(digest) / "manifest").read_bytes())
        except (OSError, ValueError):
            return None

    def tree_source(self, digest: str) -> str | None:
        """``Hub`` or ``Peer``: where a published tree's bytes came from; None on older trees."""
        try:
            value = (self.tree(digest) / SOURCE).read_text().strip()
        except (OSError, LayoutError):
            return None
        return value if value in ("Hub", "Peer") else None

    def marker_time(self, digest: str) -> float:
        try:
            return (self.tree(digest) / MARKER).stat().st_mtime
        except OSError:
            return 0.0

    # --- partial trees ---------------------------------------------------------------------------------

    def partial(self, digest: str) -> Path:
        return self.partials / hex_of(digest)

    def partial_model(self, digest: str) -> Path:
        return self.partial(digest) / "model"

    def state_file(self, digest: str, path: str) -> Path:
        return self.partial(digest) / "state" / (hashlib.sha1(path.encode()).hexdigest() + ".json")

    def partial_digests(self) -> list[str]:
        return sorted("sha256:" + e for e in _listdir(self.partials) if _HEX_NAME.fullmatch(e))

    def stray_partials(self) -> list[Path]:
        """Entries of ``partial/`` that are no digest's directory (left by something else)."""
        return [self.partials / e for e in _listdir(self.partials) if not _HEX_NAME.fullmatch(e)]

    def begin(self, digest: str, manifest: Manifest) -> None:
        """Prepare ``partial/<hex>`` for ``manifest`` (kept as it is when it already holds it)."""
        part = self.partial(digest)
        (part / "model").mkdir(parents=True, exist_ok=True)
        (part / "state").mkdir(exist_ok=True)
        existing = part / "manifest"
        if not existing.exists() or existing.read_bytes() != manifest.text:
            _write_synced(existing, manifest.text)

    def partial_bytes(self, digest: str) -> int:
        return _apparent_size(self.partial_model(digest))

    def publish(self, digest: str, manifest: Manifest, *, source: str = "") -> None:
        """Sync every file, store the manifest (and where the bytes came from), write the marker
        last, and rename the tree to its published name in one step."""
        part = self.partial(digest)
        model = part / "model"
        for entry in manifest.files:
            fd = os.open(model / entry.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for directory in {(model / e.path).parent for e in manifest.files}:
            _fsync_dir(directory)
        _write_synced(part / "manifest", manifest.text)
        if source:
            _write_synced(part / SOURCE, (source + "\n").encode())
        _write_synced(part / MARKER, (digest + "\n").encode())
        shutil.rmtree(part / "state", ignore_errors=True)
        _fsync_dir(part)
        target = self.tree(digest)
        if target.exists():  # an earlier publication of the same digest that lost its marker
            self._discard(target)
        os.rename(part, target)
        _fsync_dir(self.trees)
        _fsync_dir(self.partials)

    # --- removal ---------------------------------------------------------------------------------------

    def remove_tree(self, digest: str) -> None:
        self._discard(self.tree(digest))

    def remove_partial(self, digest: str) -> None:
        self._discard(self.partial(digest))

    def _discard(self, path: Path) -> None:
        if not path.exists():
            return
        self.scratch.mkdir(parents=True, exist_ok=True)
        doomed = self.scratch / f"{path.name}-{uuid.uuid4().hex[:8]}"
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def clear_scratch(self) -> None:
        for entry in _listdir(self.scratch):
            shutil.rmtree(self.scratch / entry, ignore_errors=True)


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def _apparent_size(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total
