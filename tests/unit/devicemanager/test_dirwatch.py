"""DirectoryEvents: the kubelet link's wake on device-plugins/ changes (inotify through libc)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from nodeplugins.devicemanager.dirwatch import DirectoryEvents


def test_nothing_changes_and_the_wait_times_out(tmp_path: Path) -> None:
    events = DirectoryEvents(tmp_path)
    try:
        assert events.wait(0.05) is False
    finally:
        events.close()


def test_a_created_and_a_removed_entry_each_wake_it(tmp_path: Path) -> None:
    events = DirectoryEvents(tmp_path)
    try:
        assert events.wait(0) is False  # the watch is on from the first wait
        (tmp_path / "kubelet.sock").write_bytes(b"")
        assert events.wait(30) is True
        assert events.wait(0) is False  # the events were read: no second wake for the same change
        (tmp_path / "kubelet.sock").unlink()
        assert events.wait(30) is True
        os.rename(tmp_path, tmp_path.with_name(tmp_path.name + "-moved"))
        assert events.wait(30) is True
    finally:
        events.close()


def test_a_directory_removed_and_made_again_is_watched_again(tmp_path: Path) -> None:
    directory = tmp_path / "device-plugins"
    directory.mkdir()
    events = DirectoryEvents(directory)
    try:
        events.wait(0)
        shutil.rmtree(directory)
        assert events.wait(30) is True
        directory.mkdir()
        events.wait(0)  # watches the new directory
        (directory / "kubelet.sock").write_bytes(b"")
        assert events.wait(30) is True
    finally:
        events.close()


def test_a_directory_made_after_it_is_watched_once_it_exists(tmp_path: Path) -> None:
    directory = tmp_path / "later"
    events = DirectoryEvents(directory)
    try:
        assert events.wait(0.01) is False
        directory.mkdir()
        events.wait(0)
        (directory / "kubelet.sock").write_bytes(b"")
        assert events.wait(30) is True
    finally:
        events.close()


def test_wake_ends_a_wait_from_another_thread(tmp_path: Path) -> None:
    events = DirectoryEvents(tmp_path)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(events.wait(3600)))
    try:
        waiter.start()
        events.wake()
        waiter.join(timeout=30)
        assert woke == [True]
    finally:
        events.close()
