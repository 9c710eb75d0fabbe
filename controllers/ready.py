"""The top-level ``Ready`` condition of the kinds a user waits on: ModelDeployment, Instance and
ModelArtifact, so ``kubectl wait --for=condition=Ready md/<name>`` works on each.

Each kind already has a word for "ready" — a phase (ModelDeployment, Instance) or a condition
(ModelArtifact's ``Resolved``) — and ``Ready`` only repeats it: ``True`` exactly when that word says
ready, its reason the phase (or the condition's reason), its message the phase message. Its
``lastTransitionTime`` moves only when its status flips, so a converged resync writes nothing new.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from api.models.common import CONDITION_REASON
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict, render

READY = "Ready"
NOT_READY = "NotReady"
_REASON = re.compile(CONDITION_REASON)
_NOT_A_REASON = re.compile(r"[^A-Za-z0-9_,:]+")


def reason_word(text: str | None, fallback: str = NOT_READY) -> str:
    """``text`` as a condition reason (CamelCase, no spaces): a Pod's own reasons pass unchanged;
    anything else is squeezed to the characters a reason may hold, or ``fallback``."""
    word = (text or "").strip()
    if word and _REASON.match(word):
        return word
    squeezed = "".join(part[:1].upper() + part[1:] for part in _NOT_A_REASON.split(word) if part)
    squeezed = squeezed.lstrip("0123456789_,:").rstrip(",:")
    return squeezed if squeezed and _REASON.match(squeezed) else fallback


def verdict(ready: bool, reason: str | None, message: str | None) -> Verdict:
    """The ``Ready`` verdict: ``True`` only when ``ready``."""
    fallback = READY if ready else NOT_READY
    return Verdict(READY, TRUE if ready else FALSE, reason_word(reason, fallback), (message or "")[:32768])


def put(
    conditions: Sequence[Mapping[str, Any]] | None, ready: Verdict, generation: int | None, now: str
) -> list[Obj]:
    """``conditions`` with ``Ready`` first, stamped from its previous entry (the time kept while its
    status holds); every other condition as it was."""
    previous = [dict(c) for c in conditions or [] if isinstance(c, Mapping)]
    stamped = render([ready], previous, generation, now)
    return [*stamped, *(c for c in previous if c.get("type") != READY)]
