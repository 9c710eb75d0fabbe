"""The e2e lanes' shared queue (tests/cluster/lanequeue.py): every module runs in exactly one lane,
longest first, with its module fixtures set up and torn down around its own tests only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from tests.cluster import lanequeue

REPO = Path(__file__).resolve().parents[2]


def test_the_weights_name_only_e2e_modules_that_exist() -> None:
    modules = {str(p.relative_to(REPO)) for p in (REPO / "tests" / "e2e").glob("test_*.py")}
    assert set(lanequeue.weights()) <= modules


def test_lanes_take_the_longest_module_first_and_an_unknown_one_weighs_the_default() -> None:
    seconds = {"b.py": 10.0, "a.py": 300.0, "c.py": 10.0}
    assert lanequeue.longest_first(["c.py", "b.py", "a.py", "d.py"], seconds) == [
        "a.py",
        "d.py",
        "b.py",
        "c.py",
    ]


def test_each_module_is_claimed_once_by_one_of_many_claimers(tmp_path: Path) -> None:
    order = [f"tests/e2e/test_{i}.py" for i in range(40)]
    taken: list[str] = []
    lock = threading.Lock()

    def lane() -> None:
        queue = lanequeue.Queue(tmp_path / "queue", order)
        while (module := queue.claim()) is not None:
            with lock:
                taken.append(module)

    threads = [threading.Thread(target=lane) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted(order)
    assert lanequeue.Queue(tmp_path / "queue", order).claim() is None


TOY_CONFTEST = """
import json, os, sys
sys.path.insert(0, {cluster!r})
import lanequeue
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    return lanequeue.run(session, os.environ["GPUSTACK_E2E_QUEUE"], json.loads(os.environ["WEIGHTS"]))

@pytest.fixture(scope="session")
def lane_log():
    path = os.environ["LOG"]
    with open(path, "a") as log:
        log.write(f"{{os.getpid()}} session-up\\n")
    yield path
    with open(path, "a") as log:
        log.write(f"{{os.getpid()}} session-down\\n")
"""

TOY_MODULE = """
import os
import pytest

@pytest.fixture(scope="module", autouse=True)
def around(lane_log):
    with open(lane_log, "a") as log:
        log.write(f"{{os.getpid()}} up {name}\\n")
    yield
    with open(lane_log, "a") as log:
        log.write(f"{{os.getpid()}} down {name}\\n")

@pytest.mark.parametrize("i", range(3))
def test_one(i, lane_log):
    with open(lane_log, "a") as log:
        log.write(f"{{os.getpid()}} test {name} {{i}}\\n")
"""


def test_two_lanes_run_every_test_once_each_module_inside_its_own_fixtures(tmp_path: Path) -> None:
    toy = tmp_path / "toy"
    toy.mkdir()
    (toy / "conftest.py").write_text(TOY_CONFTEST.format(cluster=str(REPO / "tests" / "cluster")))
    names = [f"m{i}" for i in range(6)]
    for name in names:
        (toy / f"test_{name}.py").write_text(TOY_MODULE.format(name=name))
    weights = {f"test_{name}.py": float(i) for i, name in enumerate(names)}  # m5 heaviest
    log = tmp_path / "log"
    env = {
        "GPUSTACK_E2E_QUEUE": str(tmp_path / "queue"),
        "WEIGHTS": json.dumps(weights),
        "LOG": str(log),
        "PATH": "/usr/bin:/bin",
    }
    lanes = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(toy)],
            cwd=toy,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [lane.communicate(timeout=120)[0] for lane in lanes]
    assert [lane.returncode for lane in lanes] == [0, 0], outputs

    lines = [line.split() for line in log.read_text().splitlines()]
    ran = [(words[2], words[3]) for words in lines if words[1] == "test"]
    assert sorted(ran) == sorted((name, str(i)) for name in names for i in range(3))
    by_pid: dict[str, list[list[str]]] = {}
    for words in lines:
        by_pid.setdefault(words[0], []).append(words[1:])
    for events in by_pid.values():
        assert events[0] == ["session-up"] and events[-1] == ["session-down"]
        open_module = None
        for event in events[1:-1]:
            if event[0] == "up":
                assert open_module is None  # the module before was torn down first
                open_module = event[1]
            elif event[0] == "down":
                assert event[1] == open_module
                open_module = None
            else:
                assert event[1] == open_module  # a test runs inside its own module's fixtures
        assert open_module is None
    first_modules = [next(e[1] for e in events if e[0] == "up") for events in by_pid.values()]
    assert "m5" in first_modules  # the heaviest module went first
