"""What a node agent says when it lacks a privilege (nodeplugins/privileges.py)."""

from __future__ import annotations

from pathlib import Path

from nodeplugins import privileges

ROOT_IN_PRIVILEGED = "Name:\tpython3\nCapEff:\t000001ffffffffff\n"
UID_65532_IN_PRIVILEGED = "Name:\tpython3\nCapEff:\t0000000000000000\n"  # measured: no capabilities at all


def test_mounting_needs_cap_sys_admin_and_the_fix_is_named() -> None:
    assert privileges.mount_problem(ROOT_IN_PRIVILEGED) is None
    said = privileges.mount_problem(UID_65532_IN_PRIVILEGED)
    assert said is not None and "no CAP_SYS_ADMIN" in said and "runAsUser: 0" in said


def test_capabilities_are_read_from_the_status_text() -> None:
    assert privileges.effective_capabilities("CapEff:\t0000000000200000\n") == 1 << privileges.CAP_SYS_ADMIN
    assert privileges.effective_capabilities("Name:\tx\n") == 0


def test_a_socket_directory_that_is_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "plugins_registry").write_text("not a directory")
    said = privileges.socket_dir_problem(
        tmp_path / "plugins_registry" / "x.sock", "kubelet registration socket"
    )
    assert said is not None and said.startswith(
        f"cannot create the kubelet registration socket in {tmp_path}"
    )
    assert privileges.socket_dir_problem(tmp_path / "csi" / "csi.sock", "CSI socket") is None


def test_waiting_says_each_reason_once_and_clears_it_when_able(caplog) -> None:
    import threading

    reasons = iter(["no socket dir", "no socket dir", "no CAP_SYS_ADMIN", None])
    seen: list[str | None] = []
    stop = threading.Event()
    with caplog.at_level("ERROR", logger="nodeplugins.privileges"):
        privileges.wait_until_able(lambda: next(reasons), stop, seen.append, period=0)
    assert seen == ["no socket dir", "no socket dir", "no CAP_SYS_ADMIN", None]
    assert [r.getMessage() for r in caplog.records] == ["no socket dir", "no CAP_SYS_ADMIN"]
