"""What the plugin must remember across restarts besides the trees themselves (§4.5, §4.6):

- ``references``: mount target -> digest, written **before** the bind mount;
- ``last_used``: digest -> the last mount or unmount (epoch seconds);
- ``asked``: digest -> the last time a mount asked for it (an attempt's record: a partial tree
  whose digest was asked for belongs to an attempt and is kept for a resume);
- ``failures``: digest -> reason, message, retry time, consecutive count and last failure
  (the back-off survives a restart).

On disk it is a snapshot (``ledger.json``) and a journal beside it (``ledger.journal``): each change
a mount makes is one short line appended to the journal, so a mount costs one small write whatever
the number of references on the node, not a rewrite of the whole ledger. Every journal line sets a
value outright (never increments one), so replaying the journal over any snapshot taken after some
of its lines gives the same state: a snapshot is written first, the journal emptied after, and a
crash between the two only replays lines already in the snapshot. A torn last line is skipped.

Neither is synced: what they record only matters while this boot's mounts exist (a reboot unmounts
everything), and the page cache outlives any plugin crash.

No credential, namespace, artifact or Pod name is ever in it: a target path is kubelet's, and the
rest are digests and times. A ledger that cannot be read starts empty (references are then rebuilt
from the node's mounts alone).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BACKOFF_FIRST = 60.0
BACKOFF_CAP = 3600.0
COMPACT_AFTER = 4096  # journal lines before the next change rewrites the snapshot


@dataclass
class Failure:
    reason: str
    message: str
    retry_at: float | None
    count: int
    last: float


def journal_of(path: Path) -> Path:
    return path.with_name(path.stem + ".journal")


@dataclass
class Ledger:
    references: dict[str, str] = field(default_factory=dict)
    last_used: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)
    readable: bool = True
    path: Path | None = field(default=None, repr=False, compare=False)
    _fd: int = field(default=-1, repr=False, compare=False)
    _lines: int = field(default=0, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Ledger:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError):
            return cls(readable=False, path=path)
        try:
            ledger = cls(
                references={str(k): str(v) for k, v in data.get("references", {}).items()},
                last_used={str(k): float(v) for k, v in data.get("last_used", {}).items()},
                asked={str(k): float(v) for k, v in data.get("asked", {}).items()},
                failures={str(k): Failure(**v) for k, v in data.get("failures", {}).items()},
                path=path,
            )
        except (TypeError, ValueError, AttributeError):
            return cls(readable=False, path=path)
        ledger._replay()
        return ledger

    # --- the journal -------------------------------------------------------------------------------

    def _replay(self) -> None:
        assert self.path is not None
        try:
            text = journal_of(self.path).read_text()
        except (OSError, UnicodeDecodeError):
            return
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                self._apply(entry)
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a torn or foreign line: the next ones still apply
            self._lines += 1

    def _apply(self, entry: dict[str, Any]) -> None:
        op = entry["op"]
        if op == "ref":
            self.references[str(entry["t"])] = str(entry["d"])
            self.last_used[str(entry["d"])] = float(entry["at"])
        elif op == "unref":
            digest = self.references.pop(str(entry["t"]), None)
            if digest is not None:
                self.last_used[digest] = float(entry["at"])
        elif op == "used":
            self.last_used[str(entry["d"])] = float(entry["at"])
        elif op == "asked":
            self.asked[str(entry["d"])] = float(entry["at"])
        elif op == "fail":
            self.failures[str(entry["d"])] = Failure(**entry["f"])
        elif op == "unfail":
            self.failures.pop(str(entry["d"]), None)
        else:
            raise ValueError(op)

    def record(self, op: str, **fields: Any) -> None:
        """Apply one change and append it to the journal (a snapshot instead, once it is long)."""
        entry = {"op": op, **fields}
        self._apply(entry)
        if self.path is None:
            return
        if self._lines >= COMPACT_AFTER:
            self.save(self.path)
            return
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                self._fd = os.open(journal_of(self.path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(self._fd, line)
            self._lines += 1

    # --- the snapshot --------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the whole ledger as the snapshot and empty the journal."""
        self.path = path
        data = {
            "references": self.references,
            "last_used": self.last_used,
            "asked": self.asked,
            "failures": {k: asdict(v) for k, v in self.failures.items()},
        }
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            with open(tmp, "w") as f:
                json.dump(data, f, sort_keys=True)
            os.replace(tmp, path)
            if self._fd >= 0:
                os.ftruncate(self._fd, 0)
            else:
                journal_of(path).unlink(missing_ok=True)
            self._lines = 0
        self.readable = True

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def referenced(self) -> set[str]:
        return set(self.references.values())


def backoff(count: int) -> float:
    """One minute after the first failure, doubling, capped at one hour."""
    return min(BACKOFF_FIRST * 2 ** max(count - 1, 0), BACKOFF_CAP)
