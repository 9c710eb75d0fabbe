"""Structured logs: one JSON object per line on stderr, for every component of the binary."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", ...extra}``; extra fields come from ``extra=``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure(verbosity: int = 0, stream: Any = None) -> None:
    """Route every logger to JSON lines; ``-v`` levels map to INFO (0, 1) and DEBUG (2+)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    for noisy in ("uvicorn.access", "kubernetes.client.rest", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
