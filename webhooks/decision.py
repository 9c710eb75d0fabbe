"""What an admission handler answers: allowed (with a patch and warnings) or denied.

Denials carry Kubernetes field errors, rendered the way the apiserver renders its own validation
errors (``spec.roles[0].size: Invalid value: 3: ...``), so a refusal reads the same whether the schema
or a webhook made it.  Every refusal names a field path and says what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.fielderrors import FieldError, duplicate, forbidden, invalid, not_found, required, too_many

# One field-error vocabulary for the schema judge and the webhooks (api.fielderrors).
__all__ = [
    "ALLOWED",
    "Decision",
    "FieldError",
    "allow",
    "duplicate",
    "forbidden",
    "internal_error",
    "invalid",
    "not_found",
    "refuse",
    "reject",
    "required",
    "retry_later",
    "too_many",
]


@dataclass(slots=True)
class Decision:
    """The verdict of one handler.  ``patch`` is an RFC 6902 list (mutating handlers only)."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    causes: list[FieldError] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The refused object, for Status.details: kubectl then prints `The Pod "x" is invalid: ...`.
    subject_kind: str = ""
    subject_name: str = ""

    @property
    def retryable(self) -> bool:
        return not self.allowed and self.code >= 500

    def status(self) -> dict[str, Any]:
        """The metav1.Status of an AdmissionResponse."""
        if self.allowed:
            return {"code": 200}
        status: dict[str, Any] = {
            "status": "Failure",
            "code": self.code,
            "reason": self.reason,
            "message": self.message,
        }
        if self.causes:
            details: dict[str, Any] = {"causes": [error.cause() for error in self.causes]}
            if self.subject_kind:
                details["kind"] = self.subject_kind
            if self.subject_name:
                details["name"] = self.subject_name
            status["details"] = details
        return status


ALLOWED = Decision(True)


def allow(patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None) -> Decision:
    if not patch and not warnings:
        return ALLOWED
    return Decision(True, patch=patch or [], warnings=warnings or [])


def reject(kind: str, name: str, errors: list[FieldError], warnings: list[str] | None = None) -> Decision:
    """422 Invalid, worded like the apiserver's own: ``Pod "x" is invalid: [a: ..., b: ...]``."""
    rendered = [error.render() for error in errors]
    listed = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    subject = f'{kind} "{name}"' if name else kind
    return Decision(
        False,
        code=422,
        reason="Invalid",
        message=f"{subject} is invalid: {listed}",
        causes=list(errors),
        warnings=warnings or [],
        subject_kind=kind,
        subject_name=name,
    )


def refuse(code: int, reason: str, message: str) -> Decision:
    """A denial that is not about one field (403 Forbidden, 404 NotFound, ...)."""
    return Decision(False, code=code, reason=reason, message=message)


def retry_later(message: str) -> Decision:
    """A retryable denial: what the decision needs has not been observed yet."""
    return Decision(False, code=500, reason="InternalError", message=f"{message}; retry shortly")


def internal_error(message: str) -> Decision:
    """An unexpected failure inside a handler, answered as a denial rather than an HTTP 500."""
    return Decision(False, code=500, reason="InternalError", message=f"internal error: {message}")
