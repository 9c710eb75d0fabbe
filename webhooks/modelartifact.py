"""ModelArtifact admission (model-delivery spec §3.1): defaulting and validation.

- ``revision`` defaults to ``main`` (Hugging Face) or ``master`` (ModelScope), on create and on every
  update, so re-applying the original manifest never reads as a spec change;
- exactly one ``spec.source`` member; the spec is immutable after creation;
- patterns: at most 32 per list, 1 to 256 characters, no control characters, hub sources only;
- a claim ``path`` is relative with no ``..`` segment;
- ``expectedDigest``: hub sources only, ``sha256:`` and 64 lowercase hex;
- an image ``reference`` names its repository and pins a digest (a tag is mutable);
- a hub ``revision`` holds no whitespace (no branch, tag or commit name does);
- the Secret and the claim are never looked up: their absence is reported in status, not refused.

Wrong-typed input is refused with the field's path, never an internal error.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from api.manifest import DIGEST_PATTERN, pattern_problem
from webhooks import patch as jsonpatch
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, reject, required, too_many
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

KIND = "ModelArtifact"
HUB_SOURCES = ("huggingFace", "modelScope")
SOURCES = (*HUB_SOURCES, "persistentVolumeClaim", "image")
DEFAULT_REVISION = {"huggingFace": "main", "modelScope": "master"}
MAX_PATTERNS = 32
_REPO_SEGMENT = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REPOSITORY = re.compile(rf"^{_REPO_SEGMENT}(?:/{_REPO_SEGMENT})?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IMAGE_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# The distribution reference grammar: [host[:port]/]path[:tag]@digest.
_IMAGE_HOST = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]+)?$"
)
_IMAGE_PATH = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _source_member(spec: dict[str, Any]) -> str | None:
    source = spec.get("source")
    if not isinstance(source, dict):
        return None
    present = [name for name in SOURCES if source.get(name) is not None]
    return present[0] if len(present) == 1 else None


async def default(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object
    if request.operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return allow()
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return allow()
    member = _source_member(spec)
    if member not in DEFAULT_REVISION:
        return allow()
    hub = spec["source"][member]
    if not isinstance(hub, dict) or hub.get("revision") not in (None, ""):
        return allow()
    after = copy.deepcopy(obj)
    after["spec"]["source"][member]["revision"] = DEFAULT_REVISION[member]
    return allow(jsonpatch.diff(obj, after))


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object
    if request.operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return allow()
    name = (obj.get("metadata") or {}).get("name") or request.name
    errors = check_spec(obj.get("spec"))
    if request.operation == "UPDATE" and isinstance(request.old_object, dict):
        old_spec = request.old_object.get("spec")
        if old_spec != obj.get("spec"):
            errors.append(
                forbidden(
                    "spec",
                    "spec is immutable: an artifact is an identity; create another ModelArtifact for "
                    "another source, revision, file selection or anchor",
                )
            )
    return reject(KIND, name, errors) if errors else allow()


def check_spec(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required("spec", "a ModelArtifact needs spec.source")]
    errors: list[FieldError] = []
    source = spec.get("source")
    if not isinstance(source, dict):
        return [required("spec.source", f"give exactly one of {', '.join(SOURCES)}")]
    present = [name for name in SOURCES if source.get(name) is not None]
    if not present:
        errors.append(required("spec.source", f"give exactly one of {', '.join(SOURCES)}"))
    elif len(present) > 1:
        errors.append(
            forbidden(
                "spec.source",
                f"{' and '.join(present)} are both set: give exactly one source; "
                "create one ModelArtifact per source",
            )
        )
    for member in present:
        errors += _check_member(member, source[member])
    hub = len(present) == 1 and present[0] in HUB_SOURCES
    for key in ("allowPatterns", "ignorePatterns"):
        errors += _check_patterns(spec.get(key), f"spec.{key}", hub, present)
    anchor = spec.get("expectedDigest")
    if anchor is not None:
        if present and not hub:
            errors.append(
                forbidden(
                    "spec.expectedDigest", "an anchor applies to hub sources only; remove it for this source"
                )
            )
        elif not isinstance(anchor, str) or not DIGEST_PATTERN.fullmatch(anchor):
            errors.append(
                invalid("spec.expectedDigest", anchor, 'must be "sha256:" and 64 lowercase hex digits')
            )
    return errors


def _check_member(member: str, value: Any) -> list[FieldError]:
    path = f"spec.source.{member}"
    if not isinstance(value, dict):
        return [invalid(path, value, "must be an object")]
    if member in HUB_SOURCES:
        return _check_hub(path, value)
    if member == "persistentVolumeClaim":
        return _check_claim(path, value)
    return _check_image(path, value)


def _check_hub(path: str, hub: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    repository = hub.get("repository")
    if repository is None or repository == "":
        errors.append(required(f"{path}.repository", 'name the repository, e.g. "Qwen/Qwen2.5-7B-Instruct"'))
    elif not isinstance(repository, str) or len(repository) > 256 or not _REPOSITORY.fullmatch(repository):
        errors.append(
            invalid(
                f"{path}.repository",
                repository,
                'must be "owner/name" or a bare canonical name: letters, digits, ".", "_" and "-"',
            )
        )
    elif ".." in repository or "--" in repository:
        errors.append(invalid(f"{path}.repository", repository, 'must not contain ".." or "--"'))
    revision = hub.get("revision")
    if revision is not None and (
        not isinstance(revision, str) or len(revision) > 255 or _CONTROL.search(revision)
    ):
        errors.append(
            invalid(f"{path}.revision", revision, "must be a branch, tag or commit of at most 255 characters")
        )
    elif isinstance(revision, str) and any(char.isspace() for char in revision):
        errors.append(
            invalid(
                f"{path}.revision",
                revision,
                "must not contain whitespace: no branch, tag or commit name holds any; write the name "
                'exactly as the hub shows it, e.g. "main" or a 40-hex commit',
            )
        )
    secret = hub.get("secretRef")
    if secret is not None:
        secret_name = secret.get("name") if isinstance(secret, dict) else None
        if not isinstance(secret_name, str) or not _DNS_SUBDOMAIN.fullmatch(secret_name):
            errors.append(
                invalid(
                    f"{path}.secretRef.name", secret_name, "must name a Secret in this namespace (key token)"
                )
            )
    return errors


def _check_claim(path: str, claim: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = claim.get("claimName")
    if name is None or name == "":
        errors.append(required(f"{path}.claimName", "name a PersistentVolumeClaim in this namespace"))
    elif not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        errors.append(invalid(f"{path}.claimName", name, "must be a PersistentVolumeClaim name"))
    sub = claim.get("path")
    if sub is not None:
        if not isinstance(sub, str) or len(sub) > 1024:
            errors.append(invalid(f"{path}.path", sub, "must be a relative path of at most 1024 characters"))
        elif sub.startswith("/"):
            errors.append(
                invalid(f"{path}.path", sub, 'must be relative to the volume root (no leading "/")')
            )
        elif ".." in sub.split("/"):
            errors.append(
                invalid(
                    f"{path}.path", sub, 'must not have a ".." segment: name a directory inside the claim'
                )
            )
        elif _CONTROL.search(sub):
            errors.append(invalid(f"{path}.path", sub, "must not contain control characters"))
    return errors


def _check_image(path: str, image: dict[str, Any]) -> list[FieldError]:
    reference = image.get("reference")
    if reference is None or reference == "":
        return [required(f"{path}.reference", "give an image reference pinned by digest (name@sha256:...)")]
    if not isinstance(reference, str) or len(reference) > 512:
        return [
            invalid(f"{path}.reference", reference, "must be an image reference of at most 512 characters")
        ]
    if not _IMAGE_DIGEST.search(reference):
        return [
            invalid(
                f"{path}.reference",
                reference,
                "must pin a digest (name@sha256:<64 hex>): tags are mutable, an artifact is not",
            )
        ]
    name = reference.rpartition("@")[0]
    if not _image_name_ok(name):
        return [
            invalid(
                f"{path}.reference",
                reference,
                "must name the image repository before the digest ([registry/]path[:tag]@sha256:<64 hex>, "
                "path in lower case), e.g. registry.example.com/models/qwen@sha256:<64 hex>",
            )
        ]
    return []


def _image_name_ok(name: str) -> bool:
    """Whether ``name`` is ``[host[:port]/]path[:tag]``: the host counts as one when the first
    component holds a "." or a ":" or is localhost (Docker's rule); path components are lower case."""
    if not name:
        return False
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        if not _IMAGE_HOST.match(parts[0]):
            return False
        parts = parts[1:]
    last, colon, tag = parts[-1].partition(":")
    if colon and not _IMAGE_TAG.match(tag):
        return False
    return all(_IMAGE_PATH.match(part) for part in [*parts[:-1], last])


def _check_patterns(value: Any, path: str, hub: bool, present: list[str]) -> list[FieldError]:
    if value is None:
        return []
    if present and not hub:
        return [forbidden(path, f"patterns select a hub source's files; remove them for {present[0]}")]
    if not isinstance(value, list):
        return [invalid(path, value, "must be a list of patterns")]
    errors: list[FieldError] = []
    if len(value) > MAX_PATTERNS:
        errors.append(too_many(path, len(value), MAX_PATTERNS))
    for index, pattern in enumerate(value[:MAX_PATTERNS]):
        problem = pattern_problem(pattern)
        if problem:
            errors.append(invalid(f"{path}[{index}]", pattern, problem))
    return errors
