"""The ModelArtifact controller (model-delivery spec §4.1), keyed by ``(namespace, name)``.

One pass: hold the finalizer (and release it once nothing in the namespace references the artifact);
for a claim or image source, report ``Resolved`` from the claim's existence; for a Hugging Face
source, check a new token once (``whoami``; a rejection is a Warning event ``InvalidToken``),
resolve once to a commit and a manifest digest, then revalidate access every
``model-artifact-revalidate-interval`` and at once when the Secret changes, through the staircase
of :mod:`.artifact_status`; keep ``status.nodes`` from the NodeModelStores listing the digest; and
write ``Ready`` beside ``Resolved`` on every status write.

The token lives in memory for the call only; it is never logged, written or put in an event.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, cast

from api import constants
from api import delivery as d
from api.objects import Obj
from controllers.delivery import artifact_status as st
from controllers.delivery import hub_settings
from controllers.settings import SettingsReader
from kube import changes
from kube.manager import Controller, Manager, Watch
from kube.status import replacing
from modelhub import huggingface as hf
from modelhub.errors import HubError

log = logging.getLogger("controllers.delivery.artifacts")
NODES_WRITE_EVERY = 30.0


def _secret_name(obj: Mapping[str, Any]) -> str:
    hub = ((obj.get("spec") or {}).get("source") or {}).get("huggingFace") or {}
    return ((hub.get("secretRef") or {}).get("name")) or ""


def _digest(obj: Mapping[str, Any]) -> str:
    return (((obj.get("status") or {}).get("resolved") or {}).get("manifestDigest")) or ""


class _Token:
    """A Secret's token as read this pass (never kept past it)."""

    def __init__(self, value: str | None, problem: str | None, version: str) -> None:
        self.value = value
        self.problem = problem
        self.version = version


class ModelArtifactReconciler(Controller):
    name = "model-artifacts"
    workers = 2

    def __init__(self, manager: Manager, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(manager)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.artifacts = manager.informer(
            "ModelArtifact",
            indexes={
                "secret": lambda o: (
                    [f"{changes.namespace_of(o)}/{_secret_name(o)}"] if _secret_name(o) else []
                ),
                "digest": lambda o: [_digest(o)] if _digest(o) else [],
                "claim": lambda o: [f"{changes.namespace_of(o)}/{n}"] if (n := _claim_name(o)) else [],
                # The artifacts being deleted, by namespace: what a consumer's event can release.
                "deleting": lambda o: (
                    [changes.namespace_of(o)] if (o.get("metadata") or {}).get("deletionTimestamp") else []
                ),
            },
        )
        self.secrets = self.informer("Secret")
        self.claims = self.informer("PersistentVolumeClaim")
        self.deployments = manager.informer("ModelDeployment", indexes={"namespace": _namespace_index})
        self.instances = manager.informer("Instance", indexes={"namespace": _namespace_index})
        # Each artifact's status.nodes reads only the stores that list its digest, not every node's.
        self.stores = manager.informer("NodeModelStore", indexes={"held-digest": st.held_digests})
        self.config_maps = self.informer("ConfigMap", constants.SYSTEM_NAMESPACE)
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self._lock = threading.Lock()
        self._checked_tokens: dict[str, str] = {}  # artifact uid -> Secret resourceVersion checked
        self._validated_secret: dict[str, str] = {}  # artifact uid -> Secret version at the last probe
        self._last_probe: dict[str, dt.datetime] = {}
        self._probe_path: dict[str, str] = {}
        self._nodes_written: dict[str, dt.datetime] = {}

    # --- watches --------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        def artifact(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            if event == "DELETED":
                return []
            return [(changes.namespace_of(obj), changes.name_of(obj))]

        def secret(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            key = f"{changes.namespace_of(obj)}/{changes.name_of(obj)}"
            return [
                (changes.namespace_of(a), changes.name_of(a)) for a in self.artifacts.by_index("secret", key)
            ]

        def claim(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            key = f"{changes.namespace_of(obj)}/{changes.name_of(obj)}"
            return [
                (changes.namespace_of(a), changes.name_of(a)) for a in self.artifacts.by_index("claim", key)
            ]

        def consumer(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            # Every status write of every deployment and Instance comes here: an index look-up,
            # not a scan of the cluster's artifacts (docs/performance.md, "Controllers keyed on a list").
            namespace = changes.namespace_of(obj)
            return [(namespace, changes.name_of(a)) for a in self.artifacts.by_index("deleting", namespace)]

        def store(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            digests = {*st.held_digests(obj), *st.held_digests(old or {})}
            return [
                (changes.namespace_of(a), changes.name_of(a))
                for digest in sorted(digests)
                for a in self.artifacts.by_index("digest", digest)
            ]

        return [
            Watch("ModelArtifact", artifact),
            Watch("Secret", secret),
            Watch("PersistentVolumeClaim", claim),
            Watch("ModelDeployment", consumer),
            Watch("Instance", consumer),
            Watch("NodeModelStore", store),
        ]

    # --- the pass -----------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], key)
        obj = self.artifacts.get(name, namespace)
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return self._finalize(obj)
        if constants.FINALIZER_MODEL_ARTIFACT not in (meta.get("finalizers") or []):
            self._add_finalizer(obj)
        source = (obj.get("spec") or {}).get("source") or {}
        generation = int(meta.get("generation") or 0)
        now = self.clock()
        status = obj.get("status") or {}
        if source.get("persistentVolumeClaim") is not None:
            claim = source["persistentVolumeClaim"].get("claimName") or ""
            exists = self.claims.get(claim, namespace) is not None
            return self._write(obj, st.simple_resolution(status, exists, generation, now, claim=claim))
        if source.get("image") is not None:
            return self._write(obj, st.simple_resolution(status, True, generation, now, claim=None))
        if source.get("huggingFace") is None:
            step = st.resolution_failed(
                status,
                d.SOURCE_UNAVAILABLE,
                "ModelScope sources are not resolved by this build of the operator; use a huggingFace "
                "or persistentVolumeClaim source",
                generation,
                now,
            )
            step.requeue = None  # nothing will change until the operator can resolve it
            return self._write(obj, step)
        return self._hugging_face(obj, source["huggingFace"], status, generation, now)

    def _hugging_face(
        self, obj: Obj, hub: Mapping[str, Any], status: Obj, generation: int, now: dt.datetime
    ) -> float | None:
        uid = obj["metadata"].get("uid", "")
        token = self._token(obj)
        connection = hub_settings.connection(
            self.settings, lambda n: self.config_maps.get(n, constants.SYSTEM_NAMESPACE)
        )
        if token.value and self._checked_tokens.get(uid) != token.version:
            self._check_token(obj, connection, token)
        resolved = status.get("resolved") or {}
        if not resolved.get("manifestDigest"):
            # The cache may lag our own status write: never resolve again (or report a failure
            # over a pinned identity) on the word of a stale copy.
            fresh = self.client.get("ModelArtifact", obj["metadata"]["name"], obj["metadata"]["namespace"])
            if fresh is None:
                return None
            if ((fresh.get("status") or {}).get("resolved") or {}).get("manifestDigest"):
                obj, status = fresh, fresh.get("status") or {}
                return self._revalidate(obj, hub, status, token, connection, generation, now)
            obj, status = fresh, fresh.get("status") or {}
            if token.problem:
                return self._write(
                    obj, st.resolution_failed(status, d.SECRET_NOT_FOUND, token.problem, generation, now)
                )
            problem = connection.problem()
            if problem:
                step = st.resolution_failed(status, d.SOURCE_UNAVAILABLE, problem, generation, now)
                return self._write(obj, step)
            try:
                resolution = hf.resolve(
                    connection,
                    hub.get("repository", ""),
                    hub.get("revision") or "main",
                    token.value,
                    (obj.get("spec") or {}).get("allowPatterns"),
                    (obj.get("spec") or {}).get("ignorePatterns"),
                )
            except HubError as error:
                return self._write(
                    obj, st.resolution_failed(status, error.reason, error.message, generation, now)
                )
            step = st.resolved_once(
                status,
                resolution.commit,
                resolution.manifest,
                generation,
                now,
                (obj.get("spec") or {}).get("expectedDigest"),
            )
            self._probe_path[uid] = resolution.manifest.files[0].path
            self._validated_secret[uid] = token.version
            self._last_probe[uid] = now
            log.info(
                "artifact resolved",
                extra={
                    "artifact": f"{obj['metadata']['namespace']}/{obj['metadata']['name']}",
                    "digest": resolution.manifest.digest,
                },
            )
            return self._write(obj, step)
        return self._revalidate(obj, hub, status, token, connection, generation, now)

    def _revalidate(
        self,
        obj: Obj,
        hub: Mapping[str, Any],
        status: Obj,
        token: _Token,
        connection: Any,
        generation: int,
        now: dt.datetime,
    ) -> float | None:
        uid = obj["metadata"].get("uid", "")
        interval = hub_settings.revalidate_interval(self.settings)
        if uid not in self._validated_secret:
            self._validated_secret[uid] = token.version  # after a restart: the interval governs
        changed = self._validated_secret[uid] != token.version
        due = st.revalidation_due(
            status, now, interval, secret_changed=changed, last_attempt=self._last_probe.get(uid)
        )
        if due > 0:
            return self._write(obj, st.Step(self._with_nodes(obj, status, now), due))
        self._last_probe[uid] = now
        self._validated_secret[uid] = token.version
        if token.problem:
            step = st.revalidation_failed(status, d.SECRET_NOT_FOUND, token.problem, generation, now)
            return self._write(obj, step)
        commit = status["resolved"].get("revision", "")
        repository = hub.get("repository", "")
        try:
            problem = connection.problem()
            if problem:
                raise HubError(d.SOURCE_UNAVAILABLE, problem)
            path = self._probe_path.get(uid) or self._first_path(connection, repository, commit, token.value)
            self._probe_path[uid] = path
            hf.confirm_access(connection, repository, commit, path, token.value)
        except HubError as error:
            return self._write(
                obj, st.revalidation_failed(status, error.reason, error.message, generation, now)
            )
        return self._write(obj, st.revalidated(status, generation, now, interval))

    def _first_path(self, connection: Any, repository: str, commit: str, token: str | None) -> str:
        files = hf.list_files(connection, repository, commit, token)
        if not files:
            raise HubError(d.ACCESS_DENIED, f"repository {repository} lists no file at {commit}")
        return files[0].path

    # --- pieces -----------------------------------------------------------------------------------

    def _token(self, obj: Obj) -> _Token:
        name = _secret_name(obj)
        if not name:
            return _Token(None, None, "")
        secret = self.secrets.get(name, obj["metadata"]["namespace"])
        if secret is None:
            return _Token(None, f"Secret {name} does not exist in this namespace", "")
        version = (secret.get("metadata") or {}).get("resourceVersion") or ""
        raw = (secret.get("data") or {}).get(d.SECRET_TOKEN_KEY)
        if not raw:
            return _Token(None, f"Secret {name} has no {d.SECRET_TOKEN_KEY} key", version)
        try:
            value = base64.b64decode(raw, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            return _Token(None, f"Secret {name}: its {d.SECRET_TOKEN_KEY} is not readable", version)
        return _Token(value, None, version)

    def _check_token(self, obj: Obj, connection: Any, token: _Token) -> None:
        uid = obj["metadata"].get("uid", "")
        try:
            accepted = hf.token_accepted(connection, token.value or "")
        except HubError:
            return  # the hub could not answer: check on the next pass
        self._checked_tokens[uid] = token.version
        if not accepted:
            self.recorder.event(
                obj,
                "Warning",
                d.EVENT_INVALID_TOKEN,
                f"the hub rejects the token in Secret {_secret_name(obj)} (whoami); "
                "public repositories still resolve, private and gated ones will not",
            )

    def _with_nodes(self, obj: Obj, status: Obj, now: dt.datetime) -> Obj:
        digest = _digest(obj)
        if not digest:
            return status
        nodes = st.nodes_summary(self.stores.by_index("held-digest", digest), digest)
        current = status.get("nodes")
        if nodes == current:
            return status
        uid = obj["metadata"].get("uid", "")
        counts_moved = {k: (nodes or {}).get(k) for k in ("ready", "downloading", "failed")} != {
            k: (current or {}).get(k) for k in ("ready", "downloading", "failed")
        }
        last = self._nodes_written.get(uid)
        if not counts_moved and last is not None and (now - last).total_seconds() < NODES_WRITE_EVERY:
            return status
        self._nodes_written[uid] = now
        out = dict(status)
        if nodes is None:
            out.pop("nodes", None)
        else:
            out["nodes"] = nodes
        return out

    def _write(self, obj: Obj, step: st.Step) -> float | None:
        now = self.clock()
        generation = int(obj["metadata"].get("generation") or 0)
        status = st.with_ready(self._with_nodes(obj, step.status, now), generation, now)
        if status != (obj.get("status") or {}):
            # A merge patch: a count the new summary drops (downloadingPercent once nothing
            # downloads) is removed by name, or the stored one would linger.
            nodes = status.get("nodes")
            if nodes is not None:
                stored = (obj.get("status") or {}).get("nodes") or {}
                nodes = replacing(stored, nodes)
            body = {"status": {**status, "nodes": nodes}}
            self.client.patch(
                "ModelArtifact",
                obj["metadata"]["name"],
                body,
                namespace=obj["metadata"]["namespace"],
                subresource="status",
            )
        return step.requeue

    def _add_finalizer(self, obj: Obj) -> None:
        meta = obj["metadata"]
        finalizers = [*(meta.get("finalizers") or []), constants.FINALIZER_MODEL_ARTIFACT]
        self.client.patch(
            "ModelArtifact",
            meta["name"],
            {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}},
            namespace=meta["namespace"],
        )

    def _finalize(self, obj: Obj) -> float | None:
        meta = obj["metadata"]
        if constants.FINALIZER_MODEL_ARTIFACT not in (meta.get("finalizers") or []):
            return None
        namespace = meta["namespace"]
        holders = hub_settings.references(
            meta["name"],
            self.deployments.by_index("namespace", namespace),
            self.instances.by_index("namespace", namespace),
        )
        if holders:
            return 60.0  # a consumer's deletion wakes this too
        finalizers = [f for f in meta.get("finalizers") or [] if f != constants.FINALIZER_MODEL_ARTIFACT]
        self.client.patch(
            "ModelArtifact",
            meta["name"],
            {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}},
            namespace=namespace,
        )
        with self._lock:
            uid = meta.get("uid", "")
            for memory in (
                self._checked_tokens,
                self._validated_secret,
                self._last_probe,
                self._probe_path,
                self._nodes_written,
            ):
                memory.pop(uid, None)
        return None


def _claim_name(obj: Mapping[str, Any]) -> str:
    claim = ((obj.get("spec") or {}).get("source") or {}).get("persistentVolumeClaim") or {}
    return claim.get("claimName") or ""


def _namespace_index(obj: Obj) -> list[str]:
    return [changes.namespace_of(obj)]
