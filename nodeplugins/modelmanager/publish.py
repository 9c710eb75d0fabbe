"""``NodePublishVolume`` and ``NodeUnpublishVolume`` (model-delivery spec §4.5), independent of gRPC.

Publish: validate the request (an inline ephemeral volume, a mount capability, a target under the
kubelet directory) → ``InvalidArgument``; until the artifact informer has synced → ``Unavailable``;
authorize against the ``ModelArtifact`` named ``artifact`` in kubelet's ``pod.namespace`` (UID, a
hub source, ``Resolved=True``, the same manifest digest) → ``PermissionDenied`` naming the rule;
a published tree → record the reference under the collection lock, persisted before the bind, then
bind it read-only; a digest in back-off → ``Unavailable`` (``ResourceExhausted`` for capacity) at
once; otherwise start or join the attempt → ``Aborted`` with its progress.

Unpublish works from the target path alone and succeeds for a target it never mounted.
The credential is the request's ``secrets["token"]``; no message carries it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from api import delivery as d
from api.manifest import DIGEST_PATTERN
from nodeplugins.modelmanager import metrics, mounts
from nodeplugins.modelmanager.cache import NodeCache
from nodeplugins.modelmanager.materialize import Blocked, InProgress, Materializer, Published, Request
from nodeplugins.modelmanager.status import stamp

log = logging.getLogger("modelmanager.publish")

INVALID_ARGUMENT = "INVALID_ARGUMENT"
PERMISSION_DENIED = "PERMISSION_DENIED"
UNAVAILABLE = "UNAVAILABLE"
ABORTED = "ABORTED"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
INTERNAL = "INTERNAL"


class CsiError(Exception):
    """A gRPC status for the caller: ``code`` is a ``grpc.StatusCode`` name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class PublishRequest:
    volume_id: str
    target_path: str
    volume_context: Mapping[str, str]
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    has_capability: bool = True
    block: bool = False
    readonly: bool = True


class Artifacts(Protocol):
    def synced(self) -> bool: ...
    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None: ...


@dataclass
class MountOps:
    """The kernel calls, replaceable where a test has no mount namespace of its own."""

    bind: Callable[[Path, Path], None] = mounts.bind_read_only
    unmount: Callable[[Path], bool] = mounts.unmount
    table: Callable[[], list[mounts.Mount]] = mounts.read_mountinfo
    is_mount: Callable[[Path], bool] = os.path.ismount


class NodeService:
    def __init__(
        self,
        cache: NodeCache,
        materializer: Materializer,
        artifacts: Artifacts,
        kubelet_dir: Path,
        *,
        ops: MountOps | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.cache = cache
        self.materializer = materializer
        self.artifacts = artifacts
        self.kubelet_dir = Path(os.path.normpath(kubelet_dir))
        self._under_kubelet = str(self.kubelet_dir).rstrip("/") + "/"
        self.ops = ops or MountOps()
        self.on_change = on_change
        self.cache_device = mounts.device_of(cache.layout.root)

    # --- publish ---------------------------------------------------------------------------------------

    def _target(self, raw: str) -> Path:
        if not raw:
            raise CsiError(INVALID_ARGUMENT, "target_path is required")
        normal = os.path.normpath(raw)
        if not raw.startswith("/") or ".." in raw.split("/") or not normal.startswith(self._under_kubelet):
            raise CsiError(
                INVALID_ARGUMENT, f"target_path must be under the kubelet directory {self.kubelet_dir}"
            )
        return Path(normal)

    def validate(self, request: PublishRequest) -> tuple[Path, str, str, str]:
        if not request.volume_id:
            raise CsiError(INVALID_ARGUMENT, "volume_id is required")
        target = self._target(request.target_path)
        if not request.has_capability:
            raise CsiError(INVALID_ARGUMENT, "volume_capability is required")
        if request.block:
            raise CsiError(INVALID_ARGUMENT, "only a mount volume is served, not a block device")
        context = request.volume_context
        if context.get(d.CSI_EPHEMERAL) != "true":
            raise CsiError(
                INVALID_ARGUMENT, f"only inline ephemeral volumes are served ({d.CSI_EPHEMERAL} must be true)"
            )
        name, uid, digest = (
            context.get(k, "") for k in (d.ATTR_ARTIFACT, d.ATTR_ARTIFACT_UID, d.ATTR_MANIFEST_DIGEST)
        )
        if not name or not uid or not DIGEST_PATTERN.fullmatch(digest):
            raise CsiError(
                INVALID_ARGUMENT,
                f"volumeAttributes need {d.ATTR_ARTIFACT}, {d.ATTR_ARTIFACT_UID} and a "
                f"{d.ATTR_MANIFEST_DIGEST} of the form sha256:<64 hex>",
            )
        return target, name, uid, digest

    def authorize(self, context: Mapping[str, str], name: str, uid: str, digest: str) -> dict[str, Any]:
        namespace = context.get(d.CSI_POD_NAMESPACE, "")
        if not namespace:
            raise CsiError(
                PERMISSION_DENIED, f"kubelet gave no {d.CSI_POD_NAMESPACE}: podInfoOnMount is required"
            )
        artifact = self.artifacts.get(name, namespace)
        if artifact is None:
            raise CsiError(
                PERMISSION_DENIED, f"no ModelArtifact {name} exists in the Pod's namespace {namespace}"
            )
        if (artifact.get("metadata") or {}).get("uid") != uid:
            raise CsiError(
                PERMISSION_DENIED,
                f"ModelArtifact {namespace}/{name} has another UID than {d.ATTR_ARTIFACT_UID}",
            )
        source = (artifact.get("spec") or {}).get("source") or {}
        if not (source.get("huggingFace") or source.get("modelScope")):
            raise CsiError(
                PERMISSION_DENIED, f"ModelArtifact {namespace}/{name} has no hub source to deliver"
            )
        conditions = (artifact.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == d.RESOLVED and c.get("status") == "True" for c in conditions):
            raise CsiError(PERMISSION_DENIED, f"ModelArtifact {namespace}/{name} is not Resolved")
        resolved = (artifact.get("status") or {}).get("resolved") or {}
        if resolved.get("manifestDigest") != digest:
            raise CsiError(
                PERMISSION_DENIED, f"ModelArtifact {namespace}/{name} resolved to another manifest digest"
            )
        return artifact

    def publish(self, request: PublishRequest) -> None:
        try:
            result = self._publish(request)
        except CsiError as error:
            metrics.MOUNTS.labels(
                "denied" if error.code in (PERMISSION_DENIED, INVALID_ARGUMENT) else "pending"
            ).inc()
            raise
        metrics.MOUNTS.labels(result).inc()

    def _publish(self, request: PublishRequest) -> str:
        target, name, uid, digest = self.validate(request)
        if not self.artifacts.synced():
            raise CsiError(UNAVAILABLE, "the plugin has not yet read the ModelArtifacts; retry shortly")
        artifact = self.authorize(request.volume_context, name, uid, digest)
        if self._mount_published(target, digest):
            return "hit"
        source = (artifact.get("spec") or {}).get("source") or {}
        hub = source.get("huggingFace")
        if hub is None:
            raise CsiError(INTERNAL, "this plugin downloads Hugging Face sources only")
        spec = artifact.get("spec") or {}
        resolved = (artifact.get("status") or {}).get("resolved") or {}
        outcome = self.materializer.ensure(
            Request(
                digest,
                hub.get("repository", ""),
                resolved.get("revision", ""),
                tuple(spec.get("allowPatterns") or ()),
                tuple(spec.get("ignorePatterns") or ()),
                request.secrets.get(d.SECRET_TOKEN_KEY) or None,
                anchored=resolved.get("digestSource") == d.DIGEST_SOURCE_EXPECTED,
            )
        )
        if isinstance(outcome, Published):
            if self._mount_published(target, digest):
                return "materialized"
            raise CsiError(ABORTED, f"{digest} was published and removed again; retry")
        if isinstance(outcome, Blocked):
            failure = outcome.failure
            when = f"; next attempt after {stamp(failure.retry_at)}" if failure.retry_at else ""
            code = RESOURCE_EXHAUSTED if failure.reason == d.INSUFFICIENT_CAPACITY else UNAVAILABLE
            raise CsiError(code, f"{digest} failed: {failure.reason}: {failure.message}{when}")
        assert isinstance(outcome, InProgress)
        raise CsiError(ABORTED, outcome.describe())

    def _mount_published(self, target: Path, digest: str) -> bool:
        """Mount a published tree (True), or False when the digest is not published."""
        with self.cache.lock:
            if not self.cache.layout.published(digest):
                return False
            if self.ops.is_mount(target):  # the cached path stays one stat when not mounted yet
                if mounts.mounted_digest(self.ops.table(), target, self.cache_device) == digest:
                    return True  # already mounted: idempotent
                raise CsiError(INTERNAL, "target_path already holds another mount")
            try:
                self.cache.add_reference(str(target), digest)
            except OSError as error:
                raise CsiError(INTERNAL, f"the reference could not be recorded: {error.strerror}") from None
            try:
                _make_target(target)
                self.ops.bind(self.cache.layout.tree_model(digest), target)
            except OSError as error:
                self.cache.drop_reference(str(target))
                raise CsiError(
                    INTERNAL, f"the read-only bind mount failed: {error.strerror or error}"
                ) from None
        log.info("mounted", extra={"digest": digest})
        self.on_change()
        return True

    # --- unpublish -------------------------------------------------------------------------------------

    def unpublish(self, volume_id: str, target_path: str) -> None:
        if not volume_id:
            raise CsiError(INVALID_ARGUMENT, "volume_id is required")
        target = self._target(target_path)
        with self.cache.lock:
            try:
                while mounts.mounted_at(self.ops.table(), target) is not None:
                    if not self.ops.unmount(target):
                        break
            except OSError as error:
                raise CsiError(INTERNAL, f"unmount failed: {error.strerror or error}") from None
            self.cache.drop_reference(str(target))
        try:
            target.rmdir()
        except FileNotFoundError:
            pass
        except OSError as error:
            raise CsiError(INTERNAL, f"the target directory could not be removed: {error.strerror}") from None
        self.on_change()


def _make_target(target: Path) -> None:
    """The mount point, created when kubelet did not (one mkdir when its parent exists)."""
    try:
        os.mkdir(target)
    except FileExistsError:
        pass
    except FileNotFoundError:
        target.mkdir(parents=True, exist_ok=True)
