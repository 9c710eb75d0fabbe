"""One boolean parser for every reader: Settings (webhooks and controllers alike) and the
deploy-time ``GPUSTACK_*`` environment variables (and, for the few that hold a number of seconds,
one reader of those: :func:`env_seconds`).

The words are Go's ``strconv.ParseBool`` (what the reference accepts): ``1 t T TRUE true True`` and
``0 f F FALSE false False``, surrounding blanks ignored.  Anything else is an error that names the
variable, never a silent default: ``yes`` would read as true in one reader and false in another.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

TRUE_WORDS = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE_WORDS = frozenset({"0", "f", "F", "FALSE", "false", "False"})
BOOL_WORDS = TRUE_WORDS | FALSE_WORDS


def parse_bool(value: str) -> bool:
    """Go's ``strconv.ParseBool`` (blanks around the word ignored); ValueError on anything else."""
    word = value.strip()
    if word not in BOOL_WORDS:
        raise ValueError(value)
    return word in TRUE_WORDS


class EnvironmentValueError(ValueError):
    """A ``GPUSTACK_*`` variable holds something its reader cannot use."""


def env_bool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    """The boolean environment variable ``name`` (``default`` when unset or empty)."""
    value = (env if env is not None else os.environ).get(name, "")
    if not value.strip():
        return default
    try:
        return parse_bool(value)
    except ValueError:
        raise EnvironmentValueError(
            f"{name}={value!r}: must be a boolean (true/false, 1/0, t/f); unset it for the default "
            f"({'true' if default else 'false'})"
        ) from None


def env_seconds(name: str, default: int, env: Mapping[str, str] | None = None, *, most: int = 3600) -> int:
    """The whole number of seconds in the environment variable ``name`` (``default`` when unset or
    empty), 1 to ``most``; anything else is an error that names the variable."""
    value = (env if env is not None else os.environ).get(name, "")
    if not value.strip():
        return default
    try:
        seconds = int(value.strip())
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= most:
        raise EnvironmentValueError(
            f"{name}={value!r}: must be a whole number of seconds from 1 to {most}; unset it for the "
            f"default ({default})"
        )
    return seconds


# Gate 3's Retry back-off (controllers/nodedevices/check.py): the ``requeueAfterSeconds`` it writes.
NODE_DEVICES_RETRY_SECONDS = 30  # the spec's
ENV_NODE_DEVICES_RETRY = "GPUSTACK_NODE_DEVICES_RETRY_SECONDS"


def node_devices_retry_seconds(env: Mapping[str, str] | None = None) -> int:
    """``GPUSTACK_NODE_DEVICES_RETRY_SECONDS`` (default 30); the e2e suite sets a shorter one, so a
    Workload that lost a race is placed again sooner.  Checked at the worker's start."""
    return env_seconds(ENV_NODE_DEVICES_RETRY, NODE_DEVICES_RETRY_SECONDS, env)
