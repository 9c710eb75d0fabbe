"""What the metrics tests share: the fake apiserver answering TokenReviews and SubjectAccessReviews,
a worker app served over TLS in-process, a scrape, and docs/metrics.md's reference tables read back."""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from tests.kube_fake import FakeApiServer, _Call, _Response

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "metrics.md"


@dataclass
class ReviewingApiServer(FakeApiServer):
    """The fake apiserver, plus authentication (``tokens``: token → user) and authorization
    (``readers``: users allowed ``get`` on ``/metrics``) the way the real one answers reviews."""

    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    readers: set[str] = field(default_factory=set)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    unavailable: int = 0  # the next reviews answered 500, as an apiserver in trouble

    def call_api(
        self, method: str, url: str, header_params: Any = None, body: Any = None, **kw: Any
    ) -> _Call:
        path = urlsplit(url).path
        if method == "POST" and path.endswith(("/tokenreviews", "/subjectaccessreviews")):
            review = orjson.loads(body) if isinstance(body, bytes | str) else dict(body)
            self.requests.append((method, path))
            if self.unavailable:
                self.unavailable -= 1
                return _Call(_Response(500, orjson.dumps({"reason": "InternalError", "message": "down"})))
            self.reviews.append(review)
            spec = review.get("spec") or {}
            if review["kind"] == "TokenReview":
                user = self.tokens.get(spec.get("token", ""))
                review["status"] = {"authenticated": True, "user": user} if user else {"authenticated": False}
            else:
                attributes = spec.get("nonResourceAttributes") or {}
                review["status"] = {
                    "allowed": spec.get("user") in self.readers
                    and attributes == {"path": "/metrics", "verb": "get"}
                }
            return _Call(_Response(201, orjson.dumps(review)))
        return super().call_api(method, url, header_params, body, **kw)


def scrape(url: str, *, token: str | None = None, ca: Path | None = None) -> tuple[int, str, str]:
    """``GET url``: status, content type and body (an error status is returned, not raised)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


# docs/metrics.md -----------------------------------------------------------------------------------

_ROW = re.compile(r"^\|\s*`(gpustack_[a-z0-9_]+)`\s*\|\s*(gauge|counter|histogram)\s*\|([^|]*)\|")


@dataclass(frozen=True)
class Documented:
    name: str  # as queried: counters with _total, histograms by their base name
    type: str
    labels: tuple[str, ...]
    section: str


def documented() -> dict[str, Documented]:
    """The reference tables of docs/metrics.md (the rows under "## Reference"), by metric name."""
    text = DOC.read_text()
    reference = text.split("\n## Reference\n", 1)[1]
    found: dict[str, Documented] = {}
    section = ""
    for line in reference.splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
            continue
        match = _ROW.match(line)
        if match is None:
            continue
        name, kind, cell = match.groups()
        labels = tuple(re.findall(r"`([a-z_]+)`", cell))
        assert name not in found, f"{name} is listed twice"
        found[name] = Documented(name, kind, labels, section)
    return found


def queryable(docs: dict[str, Documented]) -> dict[str, Documented]:
    """Every series name a query may use: a histogram's _bucket, _sum and _count besides."""
    names = dict(docs)
    for item in docs.values():
        if item.type == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[item.name + suffix] = item
    return names
