"""The Warning events a deployment's passes report, each once (model-deployment.md §9.7): a render
failure (news again after a clean render), runtime-version skew across an InstanceType's nodes, and
the departures of its Pods.  What was reported is remembered per deployment until it is deleted."""

from __future__ import annotations

import logging
import threading

from api import model_deployment_status as s
from api.objects import Obj
from controllers.modeldeployment import departures
from controllers.modeldeployment.image import runtime_versions
from controllers.modeldeployment.render import Context, RenderError
from kube.events import WARNING, Recorder
from readmodels.modeldeployment import Deployment

log = logging.getLogger("controllers.modeldeployment")

Key = tuple[str, str]


class Reports:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._lock = threading.Lock()
        self._recorded: dict[Key, set[str]] = {}

    def forget(self, key: Key) -> None:
        """The deployment is gone: what it reported is no longer remembered."""
        with self._lock:
            self._recorded.pop(key, None)

    def _record_once(self, obj: Obj, identity: str, kind: str, reason: str, message: str) -> None:
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        with self._lock:
            seen = self._recorded.setdefault(key, set())
            if identity in seen:
                return
            seen.add(identity)
        self.recorder.event(obj, kind, reason, message)

    def report_render(self, obj: Obj, md: Deployment, ctx: Context, errors: list[RenderError]) -> None:
        if not errors:
            with self._lock:
                seen = self._recorded.get((md.namespace, md.name), set())
                for identity in [i for i in seen if i.startswith("render/")]:
                    seen.discard(identity)  # a later failure is news again
        for error in errors:
            self._record_once(obj, f"render/{error.message}", WARNING, s.EVENT_RENDER_FAILED, error.message)
            log.warning(
                "render failed",
                extra={"namespace": md.namespace, "deployment": md.name, "error": error.message},
            )
        self._report_skew(obj, md, ctx)

    def _report_skew(self, obj: Obj, md: Deployment, ctx: Context) -> None:
        for role in md.roles:
            if role.image or md.engine_block.get("image"):
                continue
            it = ctx.instance_types.get(role.instance_type) or {}
            versions = runtime_versions(((it.get("status") or {}).get("detail")) or {})
            if versions is not None and versions.skewed:
                message = (
                    f"role {role.name}: InstanceType {role.instance_type} reports runtime versions "
                    f"{', '.join(versions.reported)}; the image takes the lowest, {versions.taken}"
                )
                self._record_once(obj, f"skew/{message}", WARNING, s.EVENT_RUNTIME_VERSION_SKEW, message)

    def record_departures(self, obj: Obj, pods: list[Obj]) -> None:
        for departure in departures.departures(pods):
            self._record_once(obj, departure.identity, WARNING, departure.reason, departure.message)
