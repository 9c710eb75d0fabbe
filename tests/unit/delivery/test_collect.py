"""Collection planning and the capacity rule (§4.6), pure: what is removed, in which order, what
never is, and how kubelet's thresholds cap the high watermark."""

from __future__ import annotations

from nodeplugins.modelmanager.capacity import Reservations, Usage, effective, kubelet_cap
from nodeplugins.modelmanager.collect import Facts, Held, plan

GiB = 1 << 30
NOW = 10_000_000.0


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def facts(held: list[Held], used: int, *, referenced=(), pinned=(), running=(), failures=None) -> Facts:
    return Facts(tuple(held), set(referenced), set(pinned), set(running), failures or {}, used, 100 * GiB)


def tree(n: int, size: int, age: float) -> Held:
    return Held(digest(n), "tree", size * GiB, NOW - age)


def test_nothing_is_removed_under_the_high_watermark() -> None:
    result = plan(facts([tree(1, 10, 99999)], used=79 * GiB), now=NOW, high=80, low=70)
    assert result.remove == [] and not result.nothing_to_remove


def test_oldest_first_down_to_the_low_watermark() -> None:
    held = [tree(1, 5, 7200), tree(2, 5, 3600), tree(3, 5, 36000), tree(4, 5, 1800)]
    result = plan(facts(held, used=85 * GiB), now=NOW, high=80, low=70)
    assert [h.digest for h in result.remove] == [digest(3), digest(1), digest(2)]
    assert result.used_after == 70 * GiB


def test_referenced_recent_and_pinned_trees_are_never_removed() -> None:
    held = [tree(1, 10, 99999), tree(2, 10, 60), tree(3, 10, 99999)]
    result = plan(
        facts(held, used=95 * GiB, referenced={digest(1)}, pinned={digest(3)}), now=NOW, high=80, low=70
    )
    assert result.remove == []
    assert result.nothing_to_remove  # above high with nothing removable: CapacityLow


def test_partials_go_only_after_a_day_without_an_ask_and_never_while_written() -> None:
    held = [
        Held(digest(1), "partial", 10 * GiB, NOW - 90000),
        Held(digest(2), "partial", 10 * GiB, NOW - 3600),
        Held(digest(3), "partial", 10 * GiB, NOW - 90000),
    ]
    result = plan(facts(held, used=90 * GiB, running={digest(3)}), now=NOW, high=80, low=70)
    assert [h.digest for h in result.remove] == [digest(1)]


def test_failure_records_are_forgotten_a_day_after_the_last_failure_when_nothing_is_on_disk() -> None:
    failures = {digest(1): NOW - 90000, digest(2): NOW - 3600, digest(3): NOW - 90000, digest(4): NOW - 90000}
    held = [tree(3, 1, 10)]
    result = plan(
        facts(held, used=10 * GiB, running={digest(4)}, failures=failures), now=NOW, high=80, low=70
    )
    assert result.forget_failures == [digest(1)]


def test_a_reservation_frees_at_least_its_shortfall() -> None:
    held = [tree(1, 3, 99999), tree(2, 3, 9999), tree(3, 3, 999)]
    result = plan(facts(held, used=60 * GiB), now=NOW, high=80, low=70, need=4 * GiB)
    assert [h.digest for h in result.remove] == [digest(1), digest(2)]


def test_usage_counts_reserved_blocks_and_rounds_down_to_five() -> None:
    usage = Usage(total=1000, used=449)
    assert usage.percent_step == 40
    assert Usage(total=1000, used=450).percent_step == 45


def test_reservations_count_other_running_downloads() -> None:
    reservations = Reservations()
    usage = Usage(100 * GiB, 50 * GiB)
    assert reservations.try_reserve("a", lambda: 20 * GiB, usage, 80)
    assert not reservations.try_reserve("b", lambda: 20 * GiB, usage, 80)  # 50 + 20 + 20 > 80
    assert reservations.shortfall("b", 20 * GiB, usage, 80) == 10 * GiB
    reservations.release("a")
    assert reservations.try_reserve("b", lambda: 20 * GiB, usage, 80)


def test_kubelet_cap_only_on_a_shared_device() -> None:
    assert kubelet_cap({"nodefsAvailable": "50%"}, 100 * GiB, False) == (None, "")


def test_kubelet_cap_defaults_to_80() -> None:
    cap, note = kubelet_cap({}, 100 * GiB, True)
    assert cap == 80 and "default" in note
    cap, note = kubelet_cap(None, 100 * GiB, True)
    assert cap == 80 and "could not be read" in note


def test_kubelet_cap_from_percentages_and_quantities() -> None:
    kubelet = {"nodefsAvailable": "20%", "imagefsAvailable": "15%", "imageGCHighThresholdPercent": 90}
    assert kubelet_cap(kubelet, 100 * GiB, True)[0] == 75
    kubelet = {"nodefsAvailable": "30Gi", "imagefsAvailable": "", "imageGCHighThresholdPercent": 90}
    assert kubelet_cap(kubelet, 100 * GiB, True)[0] == 65


def test_a_quantity_at_least_the_filesystem_takes_the_default_not_the_floor() -> None:
    kubelet = {"nodefsAvailable": "200Gi", "imagefsAvailable": "15%", "imageGCHighThresholdPercent": 85}
    cap, note = kubelet_cap(kubelet, 100 * GiB, True)
    assert cap == 80 and "200Gi" in note


def test_cap_floor_is_two() -> None:
    assert kubelet_cap({"nodefsAvailable": "99%", "imageGCHighThresholdPercent": 85}, 100 * GiB, True)[0] == 2


def test_effective_watermarks_lower_low_with_a_capped_high() -> None:
    marks = effective(90, 85, 80, "")
    assert (marks.high, marks.low) == (80, 79) and "capped at 80%" in marks.note
    assert (effective(80, 70, 80, "").high, effective(80, 70, 80, "").low) == (
        80,
        70,
    )  # defaults: not lowered
    assert effective(80, 70, None, "").note == ""
