"""Resumable hashes: the same digests as hashlib, and a saved state continues where it stopped."""

from __future__ import annotations

import hashlib
import os

from nodeplugins.modelmanager.hashing import ResumableHash
from tests.hub.repos import git_blob_id


def test_sha256_and_git_blob_sha1_match_independent_computations() -> None:
    data = os.urandom(3 << 20)
    h = ResumableHash("sha256", len(data))
    h.update(data[:100])
    h.update(bytearray(data[100:5000]))
    h.update(memoryview(bytearray(data))[5000:])
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    g = ResumableHash("gitsha1", len(data))
    g.update(memoryview(data))
    assert g.hexdigest() == git_blob_id(data)


def test_saved_state_resumes_in_a_fresh_object() -> None:
    data = os.urandom(1 << 20)
    for algo, expected in (("sha256", hashlib.sha256(data).hexdigest()), ("gitsha1", git_blob_id(data))):
        first = ResumableHash(algo, len(data))  # type: ignore[arg-type]
        first.update(data[:333_333])
        state = first.state()
        assert state is not None and first.resumable
        del first
        again = ResumableHash.restore(algo, len(data), state)  # type: ignore[arg-type]
        assert again is not None
        again.update(data[333_333:])
        assert again.hexdigest() == expected


def test_hexdigest_does_not_end_the_hash() -> None:
    h = ResumableHash("sha256", 0)
    h.update(b"ab")
    assert h.hexdigest() == hashlib.sha256(b"ab").hexdigest()
    h.update(b"c")
    assert h.hexdigest() == hashlib.sha256(b"abc").hexdigest()


def test_foreign_or_truncated_state_is_refused() -> None:
    h = ResumableHash("sha256", 1)
    state = h.state()
    assert ResumableHash.restore("sha256", 1, b"other-lib:" + state.split(b":", 1)[1]) is None
    assert ResumableHash.restore("sha256", 1, state[:-1]) is None
    assert ResumableHash.restore("gitsha1", 1, state) is None
