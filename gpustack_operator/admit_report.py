"""What ``gpustack-operator admit`` prints: one result per object, then the counts.

Three formats (``-o``):

- ``jsonl`` (the default, as before): one JSON object a line per result; the summary line goes to
  standard error, so standard output stays one parseable record a line;
- ``json``: one JSON document, ``{"results": [...], "summary": {"allowed", "denied", "skipped"}}``;
- ``text``: one line per result (its patch operations, warnings and message beneath it), then the
  summary line ``12 allowed, 2 denied, 1 skipped``.

Every record carries ``file``, ``index`` (the YAML document of that file, counted from 0, as the
error messages count them), ``kind``, ``namespace``, ``name``, ``operation``, ``decision``
(``allowed``, ``denied`` or ``skipped``: no webhook of the operator admits that kind and operation,
and it is none of our kinds), ``allowed``, ``code``, ``message``, ``warnings``, ``patch`` (RFC 6902,
what the chain changed) and ``object`` (after mutation; null when denied).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

FORMATS = ("jsonl", "json", "text")
ALLOWED, DENIED, SKIPPED = "allowed", "denied", "skipped"


@dataclass(slots=True)
class Result:
    file: str
    index: int
    kind: str
    namespace: str
    name: str
    operation: str
    decision: str
    code: int = 200
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    object: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "index": self.index,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "operation": self.operation,
            "decision": self.decision,
            "allowed": self.decision != DENIED,
            "code": self.code,
            "message": self.message,
            "warnings": self.warnings,
            "patch": self.patch,
            "object": self.object,
        }


def counts(results: Iterable[Result]) -> dict[str, int]:
    tally = {ALLOWED: 0, DENIED: 0, SKIPPED: 0}
    for result in results:
        tally[result.decision] += 1
    return tally


def summary_line(results: Iterable[Result]) -> str:
    tally = counts(results)
    return f"{tally[ALLOWED]} allowed, {tally[DENIED]} denied, {tally[SKIPPED]} skipped"


def _patch_operation(operation: dict[str, Any]) -> str:
    text = f"{operation.get('op')} {operation.get('path')}"
    if "from" in operation:
        text += f" from {operation['from']}"
    if "value" in operation:
        text += " " + orjson.dumps(operation["value"]).decode()
    return text


def _indented(label: str, text: str) -> str:
    return f"  {label}: " + text.replace("\n", "\n    ") + "\n"


def text_lines(result: Result) -> str:
    where = f"{result.namespace}/{result.name}" if result.namespace else result.name
    head = f"{result.decision:<8} {result.file} document {result.index}: {result.kind} {where}"
    if result.decision == ALLOWED and result.patch:
        count = len(result.patch)
        head += f", mutated by {count} patch operation{'s' if count != 1 else ''}"
    if result.decision == DENIED:
        head += f" ({result.code})"
    out = head + "\n"
    if result.message:
        out += _indented("message", result.message)
    out += "".join(_indented("warning", warning) for warning in result.warnings)
    out += "".join(_indented("patch", _patch_operation(op)) for op in result.patch)
    return out


def render(results: list[Result], output: str) -> tuple[list[bytes], str]:
    """The chunks for standard output and the line (possibly empty) for standard error."""
    if output == "json":
        document = {"results": [r.record() for r in results], "summary": counts(results)}
        return [orjson.dumps(document) + b"\n"], ""
    if output == "text":
        return [text_lines(r).encode() for r in results] + [summary_line(results).encode() + b"\n"], ""
    return [orjson.dumps(r.record()) + b"\n" for r in results], summary_line(results)
