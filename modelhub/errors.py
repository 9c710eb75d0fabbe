"""Hub failures and their classification into the ``Resolved`` reasons (model-delivery spec §4.1
step 4), with messages that never carry a credential or a signed URL."""

from __future__ import annotations

import json
import re

import httpx2
from huggingface_hub.errors import HfHubHTTPError

from api import delivery as d

NOT_ACCESSIBLE = "does not exist or is not accessible with the artifact's credential"
_QUERY = re.compile(r"\?[^\s'\"]*")
_BEARER = re.compile(r"(?i)(bearer|token)\s*[:=]?\s*[A-Za-z0-9_\-.]{8,}")


def redact(text: str, limit: int = 300) -> str:
    """``text`` with URL query strings (signatures) and bearer tokens removed, cut to ``limit``."""
    text = _BEARER.sub(r"\1 [redacted]", _QUERY.sub("?[redacted]", text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HubError(Exception):
    """A hub call that failed, classified: ``reason`` is one of the spec's reasons."""

    def __init__(self, reason: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"HubError({self.reason}: {self.message})"


def reason_for(status: int, error_code: str | None) -> str:
    """§4.1 step 4: 404 ``RevisionNotFound`` → ``RevisionNotFound``; 401, 403 and any other 404
    (``RepoNotFound``, ``GatedRepo``, ``EntryNotFound``) → ``AccessDenied``; 429, 5xx and anything
    else → ``SourceUnavailable`` (a hub misbehaving never reads as a refusal)."""
    if status == 404 and error_code == "RevisionNotFound":
        return d.REVISION_NOT_FOUND
    if status in (401, 403, 404):
        return d.ACCESS_DENIED
    return d.SOURCE_UNAVAILABLE


def from_status(status: int, error_code: str | None, what: str) -> HubError:
    reason = reason_for(status, error_code)
    if reason == d.ACCESS_DENIED:
        message = f"{what} {NOT_ACCESSIBLE} (HTTP {status})"
    elif reason == d.REVISION_NOT_FOUND:
        message = f"{what}: the revision does not exist (HTTP 404)"
    else:
        message = f"{what}: the hub answered HTTP {status}"
    return HubError(reason, message, status=status)


def classify(error: BaseException, what: str) -> HubError:
    """Any exception a hub call raised, as a :class:`HubError` naming ``what`` was asked."""
    if isinstance(error, HubError):
        return error
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        response = error.response
        return from_status(response.status_code, response.headers.get("X-Error-Code"), what)
    if isinstance(error, httpx2.HTTPStatusError):
        response = error.response
        return from_status(response.status_code, response.headers.get("X-Error-Code"), what)
    if isinstance(error, httpx2.TransportError | OSError):
        return HubError(d.SOURCE_UNAVAILABLE, f"{what}: the hub is unreachable ({type(error).__name__})")
    if isinstance(error, json.JSONDecodeError | KeyError | TypeError | ValueError):
        return HubError(d.SOURCE_UNAVAILABLE, f"{what}: the hub answered something that is not its API")
    return HubError(d.SOURCE_UNAVAILABLE, f"{what}: {type(error).__name__}: {redact(str(error))}")
