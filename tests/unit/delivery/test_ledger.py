"""The plugin's ledger on disk: a snapshot and a journal of one short line per change, replayed over
the snapshot on load, compacted into a new snapshot, and robust to a torn last line."""

from __future__ import annotations

from pathlib import Path

from nodeplugins.modelmanager import ledger as ledger_module
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.layout import Layout
from nodeplugins.modelmanager.ledger import Ledger, journal_of

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def cache_at(root: Path, clock: Clock) -> NodeCache:
    return NodeCache(Layout(root), clock)


def test_a_mount_appends_one_journal_line_and_a_restart_replays_it(tmp_path: Path) -> None:
    clock = Clock()
    cache = cache_at(tmp_path, clock)
    with cache.lock:
        cache.add_reference("/k/pods/a/mount", DIGEST)
    journal = journal_of(cache.layout.ledger)
    assert len(journal.read_text().splitlines()) == 1
    assert not cache.layout.ledger.exists()  # no snapshot rewrite for a mount
    clock.now = 2_000.0
    cache.drop_reference("/k/pods/a/mount")
    cache.record_failure(OTHER, "SourceUnavailable", "the hub answered HTTP 503", back_off=True)
    cache.ledger.close()

    again = Ledger.load(cache.layout.ledger)
    assert again.references == {}
    assert again.last_used == {DIGEST: 2_000.0}
    assert again.failures[OTHER].reason == "SourceUnavailable"
    assert again.failures[OTHER].retry_at == 2_060.0


def test_a_torn_last_line_is_skipped_and_the_rest_applies(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, Clock())
    with cache.lock:
        cache.add_reference("/k/pods/a/mount", DIGEST)
        cache.add_reference("/k/pods/b/mount", OTHER)
    cache.ledger.close()
    journal = journal_of(cache.layout.ledger)
    journal.write_bytes(journal.read_bytes() + b'{"op":"ref","t":"/k/pods/c/mo')
    again = Ledger.load(cache.layout.ledger)
    assert again.references == {"/k/pods/a/mount": DIGEST, "/k/pods/b/mount": OTHER}


def test_a_snapshot_empties_the_journal_and_replaying_old_lines_changes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    cache = cache_at(tmp_path, clock)
    with cache.lock:
        cache.add_reference("/k/pods/a/mount", DIGEST)
    clock.now = 1_500.0
    cache.drop_reference("/k/pods/a/mount")
    journal = journal_of(cache.layout.ledger)
    lines = journal.read_bytes()
    cache.replace_references({"/k/pods/b/mount": OTHER})  # a restart's rebuild: a snapshot
    assert journal.read_bytes() == b""
    state = Ledger.load(cache.layout.ledger)
    # A crash between the snapshot and emptying the journal replays lines the snapshot holds.
    journal.write_bytes(lines)
    replayed = Ledger.load(cache.layout.ledger)
    assert (replayed.references, replayed.last_used) == (state.references, state.last_used)
    assert replayed.references == {"/k/pods/b/mount": OTHER}


def test_a_long_journal_is_compacted_into_the_snapshot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ledger_module, "COMPACT_AFTER", 5)
    cache = cache_at(tmp_path, Clock())
    with cache.lock:
        for index in range(12):
            cache.add_reference(f"/k/pods/p{index}/mount", DIGEST)
    journal = journal_of(cache.layout.ledger)
    assert len(journal.read_text().splitlines()) < 5
    assert cache.layout.ledger.exists()
    cache.ledger.close()
    assert len(Ledger.load(cache.layout.ledger).references) == 12
