"""C.1's read rules on real files: every path stays inside the sysfs root (a symlink out is refused
and logged, never followed), every attribute read is capped at 64 KiB (a 1 GiB one is refused, not
read), and absent, unreadable and present are three different answers."""

from __future__ import annotations

import logging
import os

import pytest

from nodeplugins.devicemanager.rdma.sysfs import ATTRIBUTE_CAP, Sysfs, Unreadable


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "sys"
    (root / "devices/pci0000:00/0000:00:01.0").mkdir(parents=True)
    (root / "devices/pci0000:00/0000:00:01.0/numa_node").write_text("1\n")
    (root / "class/net").mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/0000:00:01.0", root / "class/net/eth0")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "numa_node").write_text("7\n")
    return root, secret


def test_a_relative_chain_inside_the_root_is_followed(tree):
    root, _ = tree
    sysfs = Sysfs(root)
    assert sysfs.read("class/net/eth0/numa_node") == "1"
    assert sysfs.resolve("class/net/eth0") == root.resolve() / "devices/pci0000:00/0000:00:01.0"
    assert sysfs.listdir("class/net") == ["eth0"]


def test_absent_is_none_and_not_unreadable(tree):
    sysfs = Sysfs(tree[0])
    assert sysfs.read("class/net/eth0/sriov_numvfs") is None
    assert sysfs.listdir("class/infiniband") is None
    assert sysfs.read("class/net/eth0/numa_node/below-a-file") is None


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_a_symlink_leaving_the_root_is_refused_and_logged(tree, caplog, how):
    root, secret = tree
    target = os.path.relpath(secret, root / "class/net") if how == "relative" else str(secret)
    os.symlink(target, root / "class/net/evil0")
    sysfs = Sysfs(root)
    with caplog.at_level(logging.ERROR, logger="devicemanager.rdma.sysfs"):
        found = sysfs.read("class/net/evil0/numa_node")
    assert isinstance(found, Unreadable) and "sysfs root" in found.why
    assert found.path == "class/net/evil0/numa_node"
    assert any(r.getMessage() == "sysfs read refused" and r.path == found.path for r in caplog.records)
    assert isinstance(sysfs.listdir("class/net/evil0"), Unreadable)


def test_a_refusal_is_logged_once_per_path(tree, caplog):
    root, secret = tree
    os.symlink(str(secret), root / "class/net/evil0")
    sysfs = Sysfs(root)
    with caplog.at_level(logging.WARNING, logger="devicemanager.rdma.sysfs"):
        for _ in range(3):
            sysfs.read("class/net/evil0/numa_node")
    assert sum(r.getMessage() == "sysfs read refused" for r in caplog.records) == 1


def test_dotdot_above_the_root_is_refused_before_it_is_touched(tree):
    sysfs = Sysfs(tree[0])
    found = sysfs.read("class/../../secret/numa_node")
    assert isinstance(found, Unreadable) and "leaves the sysfs root" in found.why


def test_a_symlink_loop_is_refused(tree):
    root, _ = tree
    os.symlink("loop-b", root / "class/net/loop-a")
    os.symlink("loop-a", root / "class/net/loop-b")
    found = Sysfs(root).read("class/net/loop-a/numa_node")
    assert isinstance(found, Unreadable) and "too many symlinks" in found.why


def test_a_1_gib_attribute_is_refused_not_read_whole(tree, caplog):
    root, _ = tree
    huge = root / "devices/pci0000:00/0000:00:01.0/local_cpulist"
    with huge.open("wb") as f:  # sparse: costs no disk, reads as 1 GiB of zeros
        f.truncate(1 << 30)
    with caplog.at_level(logging.ERROR, logger="devicemanager.rdma.sysfs"):
        found = Sysfs(root).read("class/net/eth0/local_cpulist")
    assert isinstance(found, Unreadable) and "larger than 64 KiB" in found.why
    assert any(r.getMessage() == "sysfs read refused" for r in caplog.records)


def test_the_cap_is_64_kib_exactly(tree):
    root, _ = tree
    attribute = root / "devices/pci0000:00/0000:00:01.0/local_cpulist"
    attribute.write_bytes(b"1" * ATTRIBUTE_CAP)
    assert Sysfs(root).read("class/net/eth0/local_cpulist") == "1" * ATTRIBUTE_CAP
    attribute.write_bytes(b"1" * (ATTRIBUTE_CAP + 1))
    assert isinstance(Sysfs(root).read("class/net/eth0/local_cpulist"), Unreadable)


def test_something_that_is_no_regular_file_is_not_opened(tree):
    root, _ = tree
    fifo = root / "devices/pci0000:00/0000:00:01.0/state"
    os.mkfifo(fifo)  # opening it for reading would block forever
    found = Sysfs(root).read("class/net/eth0/state")
    assert isinstance(found, Unreadable) and found.why == "not a regular file"


def test_an_absolute_path_inside_the_root_is_accepted_one_outside_refused(tree):
    root, secret = tree
    sysfs = Sysfs(root)
    assert sysfs.read(root / "devices/pci0000:00/0000:00:01.0/numa_node") == "1"
    assert isinstance(sysfs.read(secret / "numa_node"), Unreadable)
