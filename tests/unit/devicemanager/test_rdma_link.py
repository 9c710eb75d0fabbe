"""C.2's verdict table, row by row, and the first-seen merge that keeps a failure's start stable."""

from __future__ import annotations

import pytest

from nodeplugins.devicemanager.rdma.link import FAILED, OK, UNVERIFIED, Port, usable, verdict, with_first_seen

UP = ("4: ACTIVE", "5: LinkUp")
DOWN = ("1: DOWN", "3: Disabled")


def port(n: int, values: tuple[str | None, str | None], problem: str = "") -> Port:
    return Port(str(n), values[0], values[1], problem)


@pytest.mark.parametrize(
    ("ports", "state"),
    [
        ([port(1, UP)], OK),
        ([port(1, DOWN), port(2, UP)], OK),  # some port carries the link
        ([port(1, ("4: ACTIVE", "3: Disabled"))], FAILED),  # active but no physical link
        ([port(1, ("5: ACTIVE_DEFER", "5: LinkUp"))], FAILED),  # the whole enum name is compared
        ([port(1, ("ACTIVE", "LinkUp"))], OK),  # a value without its number is taken whole
        ([port(1, ("4: active", "5: LinkUp"))], FAILED),  # case matters: the kernel writes ACTIVE
        ([port(1, DOWN), port(2, DOWN)], FAILED),  # every port read, none carries it
        ([port(1, DOWN), port(2, (None, "5: LinkUp"), "state unreadable")], UNVERIFIED),
        ([port(1, (None, None), "missing")], UNVERIFIED),
        ([port(1, UP), port(2, (None, None), "unreadable")], OK),  # established despite the other
        ([], UNVERIFIED),  # nothing listed: no answer, not "down"
    ],
)
def test_the_verdict_table(ports, state):
    assert verdict("mlx5_0", ports)["state"] == state


def test_failed_is_never_reached_from_an_unreadable_file():
    """One unreadable port beside several down ones leaves 'all down' unestablished."""
    ports = [port(1, DOWN), port(2, DOWN), port(3, ("1: DOWN", None), "phys_state cannot read: EIO")]
    found = verdict("mlx5_0", ports)
    assert found["state"] == UNVERIFIED
    assert "port 3: phys_state cannot read: EIO" in found["reason"]


def test_an_unlistable_port_directory_is_unverified_with_its_reason():
    found = verdict("mlx5_0", None, "cannot list: Permission denied")
    assert found == {
        "state": UNVERIFIED,
        "reason": "mlx5_0: the ports could not be listed: cannot list: Permission denied",
    }


def test_a_failure_carries_the_raw_port_values():
    found = verdict("mlx5_1", [port(1, DOWN), port(2, ("2: INIT", "5: LinkUp"))])
    assert found["state"] == FAILED
    assert "'1: DOWN'" in found["reason"] and "'3: Disabled'" in found["reason"]
    assert "'2: INIT'" in found["reason"] and found["reason"].startswith("mlx5_1: ")


def test_first_seen_is_kept_while_failed_and_dropped_otherwise():
    failed = verdict("mlx5_0", [port(1, DOWN)])
    first = with_first_seen(failed, None, "2026-01-01T00:00:00Z")
    assert first["firstSeenTime"] == "2026-01-01T00:00:00Z"
    later = with_first_seen(failed, first, "2026-01-01T00:05:00Z")
    assert later == first  # compares equal: no rewrite
    healed = with_first_seen(verdict("mlx5_0", [port(1, UP)]), later, "2026-01-01T00:06:00Z")
    assert healed == {"state": OK}
    again = with_first_seen(failed, healed, "2026-01-01T00:07:00Z")
    assert again["firstSeenTime"] == "2026-01-01T00:07:00Z"  # a new outage
    unverified = with_first_seen({"state": UNVERIFIED, "reason": "r"}, first, "2026-01-01T00:08:00Z")
    assert "firstSeenTime" not in unverified  # no outage to be the start of


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"rdma": True, "rdmaDevice": "mlx5_0"}, True),  # no verdict: bound means usable
        ({}, False),
        ({"rdma": True, "link": {"state": FAILED}}, False),  # the verdict beats the flag
        ({"rdma": False, "link": {"state": UNVERIFIED}}, True),  # an unreadable tree still counts
        ({"rdma": True, "link": {"state": OK}}, True),
    ],
)
def test_usable_an_explicit_verdict_beats_the_rdma_flag_both_ways(record, expected):
    assert usable(record) is expected
