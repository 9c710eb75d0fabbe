"""NodeModelStore status (§2.2, §4.7): rendered from the node's facts, hour-truncated use times,
usage steps of five, at most 256 entries, conditions, and the progress write throttle."""

from __future__ import annotations

import datetime as dt

from api import delivery as d
from nodeplugins.modelmanager.capacity import Usage
from nodeplugins.modelmanager.ledger import Failure
from nodeplugins.modelmanager.status import Download, NodeFacts, Throttle, Tree, render, with_transition_times

T0 = dt.datetime(2026, 3, 1, 12, 34, 56, tzinfo=dt.UTC).timestamp()


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def facts(**kw) -> NodeFacts:
    base = dict(generation=3, usage=Usage(1000, 437), stored=300, trees={}, downloads={}, failures={})
    base.update(kw)
    return NodeFacts(**base)


def test_entries_by_state_with_hour_truncated_use_and_no_tenant() -> None:
    status = render(
        facts(
            trees={digest(1): Tree(100, T0, True, "Hub"), digest(5): Tree(7, T0, False)},
            downloads={digest(2): Download(200, 50, "Peer"), digest(3): Download(None, 0)},
            failures={
                digest(4): Failure(d.INTEGRITY_MISMATCH, "a file's hash does not match", T0 + 60, 1, T0)
            },
        )
    )
    by = {m["digest"]: m for m in status["models"]}
    assert by[digest(1)] == {
        "digest": digest(1),
        "state": "Ready",
        "sizeBytes": 100,
        "referenced": True,
        "lastUsedTime": "2026-03-01T12:00:00Z",
        "source": "Hub",
    }
    assert "source" not in by[digest(5)]  # published before its source was recorded
    assert by[digest(2)]["state"] == "Downloading" and by[digest(2)]["downloadedBytes"] == 50
    assert by[digest(2)]["source"] == "Peer" and by[digest(3)]["source"] == "Hub"
    assert "sizeBytes" not in by[digest(3)]  # not listed yet
    assert (
        by[digest(4)]["retryTime"] == "2026-03-01T12:35:56Z"
        and by[digest(4)]["reason"] == d.INTEGRITY_MISMATCH
    )
    assert status["capacity"] == {"totalBytes": 1000, "storedBytes": 300, "usedPercent": 40}
    assert status["observedGeneration"] == 3
    assert [c["type"] for c in status["conditions"]] == ["Ready", "CapacityLow"]
    assert "peerAddress" not in status
    assert render(facts(peer_address="10.0.0.5:32445"))["peerAddress"] == "10.0.0.5:32445"


def test_summary_columns_count_ready_models_and_running_downloads() -> None:
    status = render(
        facts(
            trees={digest(1): Tree(1, T0, False)},
            downloads={
                digest(2): Download(1000, 370),
                digest(3): Download(1000, 100),
                digest(4): Download(None, 0),
            },
        )
    )
    assert status["summary"] == {"models": 1, "downloading": "3 (20%)"}
    assert render(facts())["summary"] == {"models": 0}
    throttle = Throttle()
    throttle.written(status, 0)
    moved = render(
        facts(
            trees={digest(1): Tree(1, T0, False)},
            downloads={
                digest(2): Download(1000, 380),
                digest(3): Download(1000, 100),
                digest(4): Download(None, 0),
            },
        )
    )
    assert not throttle.due(moved, 5)  # the mean moved: progress, not a change of state


def test_invalid_configuration_and_nothing_to_remove() -> None:
    status = render(
        facts(
            config_problem="spec.watermarks.lowPercent (90) must be below highPercent (80)",
            nothing_to_remove=True,
        )
    )
    ready, low = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", d.REASON_INVALID_CONFIGURATION)
    assert (low["status"], low["reason"]) == ("True", d.REASON_NOTHING_TO_REMOVE)


def test_at_most_256_entries_referenced_first_then_most_recent() -> None:
    trees = {digest(i): Tree(1, T0 + i, i % 100 == 0) for i in range(300)}
    status = render(facts(trees=trees, notes=["collection skipped: no configuration applied yet"]))
    kept = {m["digest"] for m in status["models"]}
    assert len(kept) == 256
    assert {digest(0), digest(100), digest(200)} <= kept  # referenced, though old
    assert digest(299) in kept and digest(5) not in kept
    message = status["conditions"][0]["message"]
    assert "44 models not listed" in message and "collection skipped" in message


def test_throttle_writes_changes_at_once_and_progress_on_time_and_five_percent() -> None:
    throttle = Throttle()
    first = render(facts(downloads={digest(1): Download(1000, 0)}))
    assert throttle.due(first, 0)
    throttle.written(first, 0)
    small = render(facts(downloads={digest(1): Download(1000, 40)}))
    assert not throttle.due(small, 10)  # too soon
    assert not throttle.due(small, 40)  # 4% is not enough
    enough = render(facts(downloads={digest(1): Download(1000, 60)}))
    assert not throttle.due(enough, 20)  # 6% but under 30 s
    assert throttle.due(enough, 31)
    throttle.written(enough, 31)
    # A state change is written at once, whatever the time.
    published = render(facts(trees={digest(1): Tree(1000, T0, False)}))
    assert throttle.due(published, 32)
    throttle.written(published, 32)
    # Quiet node: nothing.
    assert not throttle.due(render(facts(trees={digest(1): Tree(1000, T0, False)})), 500)
    # lastUsedTime moves within the hour: nothing; into the next hour: a write.
    assert not throttle.due(render(facts(trees={digest(1): Tree(1000, T0 + 60, False)})), 501)
    assert throttle.due(render(facts(trees={digest(1): Tree(1000, T0 + 3600, False)})), 502)


def test_used_percent_step_is_a_change() -> None:
    throttle = Throttle()
    a = render(facts(usage=Usage(1000, 437)))
    throttle.written(a, 0)
    assert not throttle.due(render(facts(usage=Usage(1000, 449))), 1)
    assert throttle.due(render(facts(usage=Usage(1000, 450))), 1)


def test_transition_times_hold_while_status_holds() -> None:
    one = with_transition_times(render(facts()), None, T0)
    two = with_transition_times(render(facts()), one["conditions"], T0 + 100)
    assert two["conditions"][0]["lastTransitionTime"] == one["conditions"][0]["lastTransitionTime"]
    flipped = with_transition_times(render(facts(config_problem="bad")), two["conditions"], T0 + 200)
    assert flipped["conditions"][0]["lastTransitionTime"] != one["conditions"][0]["lastTransitionTime"]
