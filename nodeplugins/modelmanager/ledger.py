"""What the plugin must remember across restarts besides the trees themselves (§4.5, §4.6):

- ``references``: mount target -> digest, written (and synced) **before** the bind mount;
- ``last_used``: digest -> the last mount or unmount (epoch seconds);
- ``asked``: digest -> the last time a mount asked for it (an attempt's record: a partial tree
  whose digest was asked for belongs to an attempt and is kept for a resume);
- ``failures``: digest -> reason, message, retry time, consecutive count and last failure
  (the back-off survives a restart).

No credential, namespace, artifact or Pod name is ever in it: a target path is kubelet's, and the
rest are digests and times. A ledger that cannot be read starts empty (references are then rebuilt
from the node's mounts alone).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BACKOFF_FIRST = 60.0
BACKOFF_CAP = 3600.0


@dataclass
class Failure:
    reason: str
    message: str
    retry_at: float | None
    count: int
    last: float


@dataclass
class Ledger:
    references: dict[str, str] = field(default_factory=dict)
    last_used: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)
    readable: bool = True

    @classmethod
    def load(cls, path: Path) -> Ledger:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError):
            return cls(readable=False)
        try:
            return cls(
                references={str(k): str(v) for k, v in data.get("references", {}).items()},
                last_used={str(k): float(v) for k, v in data.get("last_used", {}).items()},
                asked={str(k): float(v) for k, v in data.get("asked", {}).items()},
                failures={str(k): Failure(**v) for k, v in data.get("failures", {}).items()},
            )
        except (TypeError, ValueError, AttributeError):
            return cls(readable=False)

    def save(self, path: Path) -> None:
        data = {
            "references": self.references,
            "last_used": self.last_used,
            "asked": self.asked,
            "failures": {k: asdict(v) for k, v in self.failures.items()},
        }
        # Replaced atomically, not synced: what it records only matters while this boot's mounts
        # exist (a reboot unmounts everything), and the page cache outlives any plugin crash. A
        # mount stays one stat and one bind, not a disk flush.
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
        self.readable = True

    def referenced(self) -> set[str]:
        return set(self.references.values())


def backoff(count: int) -> float:
    """One minute after the first failure, doubling, capped at one hour."""
    return min(BACKOFF_FIRST * 2 ** max(count - 1, 0), BACKOFF_CAP)
