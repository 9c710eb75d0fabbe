"""The work queue: one entry per key, no key handed to two workers, back-off, delays."""

from __future__ import annotations

import threading
import time

from kube.workqueue import WorkQueue


def test_a_key_is_queued_once():
    queue = WorkQueue("t1")
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert queue.get(0) == "a" and queue.get(0) == "b" and queue.get(0) is None


def test_a_key_added_while_processing_comes_back_after_done():
    queue = WorkQueue("t2")
    queue.add("a")
    key = queue.get(0)
    queue.add("a")
    assert queue.get(0) is None  # not handed to a second worker
    queue.done(key)
    assert queue.get(0) == "a"


def test_rate_limited_backoff_doubles_and_forget_resets():
    queue = WorkQueue("t3", base_delay=0.01, max_delay=0.04)
    delays = [queue.add_rate_limited("a") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    assert queue.failures("a") == 4
    queue.forget("a")
    assert queue.failures("a") == 0


def test_delayed_add_arrives_after_the_delay():
    queue = WorkQueue("t4")
    queue.add_after("a", 0.05)
    assert queue.get(0) is None
    started = time.monotonic()
    assert queue.get(1.0) == "a"
    assert time.monotonic() - started >= 0.03


def test_shutdown_wakes_waiting_workers():
    queue = WorkQueue("t5")
    got = []
    thread = threading.Thread(target=lambda: got.append(queue.get()))
    thread.start()
    queue.shutdown()
    thread.join(2)
    assert got == [None]
