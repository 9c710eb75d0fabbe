"""The manifest of a model's files and its digest (model-delivery spec §4.2), and the pattern
semantics that select a hub source's files (§4.1 step 2).

The manifest is UTF-8 text, every line LF-terminated: ``gpustack-manifest v1``, then one line per
file, ``<algo>:<hex> <size> <path>``, sorted by the path's UTF-8 bytes. ``algo`` is ``sha256`` for
an LFS file (its LFS oid) and ``gitsha1`` otherwise (its git blob id). The digest is ``sha256:`` and
the hex SHA-256 of the whole text. Source, repository, commit and patterns are not inputs: the same
files give the same digest. The digest is an identity, never an authorization.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

HEADER = "gpustack-manifest v1"
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEX = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "gitsha1": re.compile(r"^[0-9a-f]{40}$")}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LINE = re.compile(r"^(sha256|gitsha1):([0-9a-f]+) (0|[1-9][0-9]*) (.+)$")

Algo = Literal["sha256", "gitsha1"]


class ManifestError(ValueError):
    """A file list that cannot form a manifest (a bad path, a bad hash, a duplicate)."""


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """One file: where it goes, how big it is and the hash that verifies it."""

    path: str
    size: int
    algo: Algo
    hex: str

    @property
    def line(self) -> str:
        return f"{self.algo}:{self.hex} {self.size} {self.path}"


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a manifest path, or None: valid UTF-8, relative, no control
    characters, no empty, ``.`` or ``..`` segment."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if path.startswith("/"):
        return "is absolute"
    if _CONTROL.search(path):
        return "contains a control character"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "has an empty, '.' or '..' segment"
    return None


def check_file(entry: ManifestFile) -> None:
    problem = path_problem(entry.path)
    if problem:
        raise ManifestError(f"file path {entry.path!r} {problem}")
    if entry.algo not in _HEX or not _HEX[entry.algo].fullmatch(entry.hex):
        raise ManifestError(f"file {entry.path!r} has no valid {entry.algo} hash")
    if isinstance(entry.size, bool) or not isinstance(entry.size, int) or entry.size < 0:
        raise ManifestError(f"file {entry.path!r} has no valid size")


@dataclass(frozen=True, slots=True)
class Manifest:
    """Files sorted by path bytes, with the canonical text and its digest."""

    files: tuple[ManifestFile, ...]
    text: bytes
    digest: str

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @classmethod
    def of(cls, files: Iterable[ManifestFile]) -> Manifest:
        ordered = sorted(files, key=lambda f: f.path.encode("utf-8", "surrogatepass"))
        seen: set[str] = set()
        for entry in ordered:
            check_file(entry)
            if entry.path in seen:
                raise ManifestError(f"file path {entry.path!r} is listed twice")
            seen.add(entry.path)
        text = "".join(line + "\n" for line in [HEADER, *(f.line for f in ordered)]).encode()
        return cls(tuple(ordered), text, digest_of(text))

    @classmethod
    def parse(cls, text: bytes) -> Manifest:
        """The manifest ``text`` is, checked to be canonical (it re-renders byte for byte)."""
        try:
            lines = text.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            raise ManifestError("manifest is not UTF-8") from None
        if len(lines) < 2 or lines[0] != HEADER or lines[-1] != "":
            raise ManifestError("manifest lacks its header line or final newline")
        files = []
        for line in lines[1:-1]:
            match = _LINE.fullmatch(line)
            if not match:
                raise ManifestError(f"manifest line {line!r} is not <algo>:<hex> <size> <path>")
            files.append(ManifestFile(match[4], int(match[3]), match[1], match[2]))  # type: ignore[arg-type]
        manifest = cls.of(files)
        if manifest.text != text:
            raise ManifestError("manifest is not in canonical order")
        return manifest


def digest_of(text: bytes) -> str:
    return "sha256:" + hashlib.sha256(text).hexdigest()


# --- Patterns ---------------------------------------------------------------------------------------


def pattern_matches(path: str, pattern: str) -> bool:
    """Python ``fnmatch.fnmatchcase``: case-sensitive, ``*`` and ``?`` cross ``/``; a pattern ending
    in ``/`` selects everything under that directory."""
    if pattern.endswith("/"):
        pattern += "*"
    return fnmatchcase(path, pattern)


def selected(path: str, allow: Sequence[str] | None, ignore: Sequence[str] | None) -> bool:
    """An empty allow list keeps every file; an ignore pattern beats an allow pattern."""
    if allow and not any(pattern_matches(path, p) for p in allow):
        return False
    return not (ignore and any(pattern_matches(path, p) for p in ignore))


def pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` is not an acceptable pattern (§3.1 rule 4), or None."""
    if not isinstance(pattern, str):
        return "must be a string"
    if not 1 <= len(pattern) <= 256:
        return "must be 1 to 256 characters long"
    if _CONTROL.search(pattern):
        return "must not contain control characters"
    return None
