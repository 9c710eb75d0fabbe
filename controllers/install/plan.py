"""What the worker's start-up applies (operations spec D.4, D.5), rendered without any I/O.

Every replica renders the same objects from the same flags, so two replicas (or an old and a new
version during a roll) applying them at once converge instead of fighting:

1. the system namespace, created when absent;
2. every CRD of ``api.models`` (server-side apply, so an upgrade changes them in place);
3. no extension API services: ``Setting`` is a CRD here (README, "Settings");
4. the two webhook configurations, from the webhook registry, with the CA bundle;
5. the Settings that do not exist yet, each seeded from ``GPUSTACK_<NAME>`` or its default;
6. no applications: the chart deploys them (``--disable-applications=*``);
7. the NodeFeatureRule ``gpustack-cpu-info``;
8. the AdmissionCheck ``gpustack-node-devices`` and 9. ``gpustack-model-deployment-joint`` (spec
   only; their controllers mark them Active).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api import SETTINGS_API_VERSION, constants, crds
from api import settings as registry
from api.objects import Obj
from controllers.modeldeployment import joint
from controllers.nodedevices import check as node_devices
from controllers.nodefeatures import render as nodefeatures
from webhooks import configurations

FIELD_MANAGER = constants.FIELD_MANAGER
PART_OF = {constants.LABEL_PART_OF: "gpustack-operator"}


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where the apiserver calls the webhooks: a URL (a worker outside the cluster, one replica or
    a fronting balancer) or the worker's Service (chart mode)."""

    url: str = ""
    service: str = ""
    namespace: str = constants.SYSTEM_NAMESPACE
    port: int = 443

    def client_config(self) -> dict[str, object]:
        if self.url:
            return {"url": self.url}
        return {"service": {"name": self.service, "namespace": self.namespace, "port": self.port}}

    def describe(self) -> str:
        return self.url or f"service {self.namespace}/{self.service}:{self.port}"


def system_namespace(name: str = constants.SYSTEM_NAMESPACE) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def custom_resource_definitions() -> list[Obj]:
    return crds.render_all()


def webhook_configurations(
    endpoint: WebhookEndpoint, ca_bundle: bytes, worker_identity: str = ""
) -> list[Obj]:
    """Both configurations, pointed at ``endpoint`` and trusting ``ca_bundle``."""
    config = endpoint.client_config()
    return configurations.render(
        url=str(config["url"]) if "url" in config else None,
        service=config.get("service"),  # type: ignore[arg-type]
        ca_bundle=ca_bundle,
        worker_identity=worker_identity,
    )


def setting_object(name: str, value: str, namespace: str = constants.SYSTEM_NAMESPACE) -> Obj:
    return {
        "apiVersion": SETTINGS_API_VERSION,
        "kind": "Setting",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {"value": value},
    }


def missing_settings(existing: Iterable[str], seeds: Mapping[str, str]) -> list[Obj]:
    """The Settings to create: every registered one not stored yet, with its seed.  A stored one is
    never rewritten, whatever the environment says now."""
    present = set(existing)
    return [setting_object(name, seeds[name]) for name in registry.SETTINGS if name not in present]


def setting_status(name: str, spec_value: str | None) -> dict[str, object]:
    """``status`` of Setting ``name``: the value readers use (the default while none is stored),
    its description and flags."""
    definition = registry.SETTINGS[name]
    value = spec_value if spec_value is not None else definition.default
    return {
        "value": "(sensitive)" if definition.sensitive else value,
        "description": definition.effect,
        "editable": definition.editable,
        "sensitive": definition.sensitive,
    }


def cpu_info_rule(vendor_ids: Iterable[str] | None = None) -> Obj:
    return nodefeatures.cpu_info_rule(vendor_ids)


def admission_checks() -> list[tuple[Obj, str]]:
    """The two AdmissionChecks with the field manager their controllers apply them under."""
    return [
        (node_devices.admission_check(), node_devices.FIELD_MANAGER),
        (joint.admission_check(), joint.FIELD_MANAGER),
    ]
