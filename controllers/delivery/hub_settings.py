"""The hub connection and revalidation interval the worker reads from Settings (spec §6), and which
deployments and Instances reference an artifact (the deletion finalizer's question, §4.1 item 8)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from api import constants, setting_names
from api.settings import definition, parse_duration
from controllers.settings import SettingsReader
from modelhub.connection import HubConnection

ENDPOINT = setting_names.MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT
PROXY = setting_names.MODEL_ARTIFACT_HTTPS_PROXY
NO_PROXY = setting_names.MODEL_ARTIFACT_NO_PROXY
CA_BUNDLE = setting_names.MODEL_ARTIFACT_CA_BUNDLE
REVALIDATE = setting_names.MODEL_ARTIFACT_REVALIDATE_INTERVAL
CA_KEY = "ca.crt"


def connection(
    settings: SettingsReader, config_map: Callable[[str], Mapping[str, Any] | None]
) -> HubConnection:
    """The connection the Settings describe; a named CA ConfigMap that is absent (or lacks
    ``ca.crt``) gives a connection whose :meth:`~HubConnection.problem` says so."""
    ca_name = settings.value(CA_BUNDLE).strip()
    ca_pem = ""
    if ca_name:
        found = config_map(ca_name)
        ca_pem = str(((found or {}).get("data") or {}).get(CA_KEY) or "")
        if not ca_pem:
            ca_pem = f"# ConfigMap {constants.SYSTEM_NAMESPACE}/{ca_name} has no {CA_KEY}\n"
    return HubConnection(
        settings.value(ENDPOINT).strip(),
        settings.value(PROXY).strip(),
        settings.value(NO_PROXY).strip(),
        ca_pem,
    )


def revalidate_interval(settings: SettingsReader) -> float:
    try:
        seconds = parse_duration(settings.value(REVALIDATE).strip())
    except ValueError:
        seconds = parse_duration(definition(REVALIDATE).default)
    return max(seconds, 60.0)


def references(
    name: str, deployments: Iterable[Mapping[str, Any]], instances: Iterable[Mapping[str, Any]]
) -> list[str]:
    """``Kind/name`` of every deployment and Instance (of one namespace) that names the artifact."""
    out = []
    for md in deployments:
        ref = (((md.get("spec") or {}).get("model") or {}).get("artifactRef") or {}).get("name")
        if ref == name:
            out.append(f"ModelDeployment/{md['metadata']['name']}")
    for inst in instances:
        for volume in (inst.get("spec") or {}).get("additionalVolumes") or []:
            ref = (((volume or {}).get("model") or {}).get("artifactRef") or {}).get("name")
            if ref == name:
                out.append(f"Instance/{inst['metadata']['name']}")
                break
    return sorted(out)
