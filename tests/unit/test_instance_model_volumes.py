"""An Instance's ``additionalVolumes[].model`` (model-delivery spec §4.3, Instance): the facts reader
plans the weights' volume from what the API holds (the artifact, the CSIDriver, a claim source's
claim and volume), or names what holds the Pod back; the Pod mounts the weights read-only."""

from __future__ import annotations

import copy
from typing import Any

from api import constants
from api.objects import Obj
from controllers.instance.facts import Blocked, FactsReader
from controllers.instance.pod import PodFacts, render_pod
from controllers.settings import SettingsReader
from kube.informer import Informer
from tests.unit.instances import instance

DIGEST = "sha256:" + "cd" * 32
A10G: Obj = {
    "metadata": {"name": "gpustack--nvidia-a10g-linux-amd64"},
    "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g"},
    "status": {"entrance": "gpustack-fnv64-c4680bb149644f1c", "detail": {"manufacturer": "nvidia"}},
}
CSI = {"kind": "CSIDriver", "metadata": {"name": constants.CSI_DRIVER_MODEL}}


class Objects:
    """The API as the facts reader reaches it: GETs by kind, name and namespace."""

    def __init__(self, *objects: Obj) -> None:
        self.objects = {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
        }

    def get(self, kind: str, name: str, namespace: str = "", **_: Any) -> Obj | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, kind: str, namespace: str = "", **_: Any) -> tuple[list[Obj], str]:
        return [], "1"


def reader(*objects: Obj) -> FactsReader:
    client = Objects(*objects)
    informer = Informer(client, "Setting")  # type: ignore[arg-type]
    empty = Informer(client, "Node")  # type: ignore[arg-type]
    return FactsReader(client, SettingsReader(informer), empty, empty, empty)  # type: ignore[arg-type]


def artifact(source: Obj | None = None, *, resolved: bool = True) -> Obj:
    status: Obj = {"conditions": [{"type": "Resolved", "status": "True" if resolved else "False"}]}
    if resolved:
        status["resolved"] = {"revision": "c" * 40, "manifestDigest": DIGEST}
    return {
        "kind": "ModelArtifact",
        "metadata": {"name": "qwen", "namespace": "team-a", "uid": "art-1"},
        "spec": {"source": source or {"huggingFace": {"repository": "Qwen/Qwen2.5-7B-Instruct"}}},
        "status": status,
    }


def with_model(**entry: Any) -> Obj:
    obj = instance(
        additionalVolumes=[{"mountPath": "/model", "model": {"artifactRef": {"name": "qwen"}}, **entry}]
    )
    del obj["spec"]["sshPublicKey"]
    return obj


def test_a_hub_artifact_mounts_through_the_csi_plugin_read_only() -> None:
    obj = with_model()
    facts = reader(artifact(), CSI).read(obj, A10G)
    assert isinstance(facts, PodFacts)
    pod = render_pod(obj, facts)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "additional-0")
    assert volume == {
        "name": "additional-0",
        "csi": {
            "driver": constants.CSI_DRIVER_MODEL,
            "readOnly": True,
            "volumeAttributes": {"artifact": "qwen", "artifactUID": "art-1", "manifestDigest": DIGEST},
        },
    }
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    assert {"name": "additional-0", "mountPath": "/model", "readOnly": True} in main["volumeMounts"]
    assert not any(e["name"].startswith("HF_") for e in main.get("env") or [])


def test_what_holds_the_pod_back_is_named() -> None:
    obj = with_model()
    missing = reader(CSI).read(obj, A10G)
    assert isinstance(missing, Blocked) and "ModelArtifact qwen does not exist" in missing.message
    unresolved = reader(artifact(resolved=False), CSI).read(obj, A10G)
    assert isinstance(unresolved, Blocked) and "ArtifactNotResolved" in unresolved.message
    no_driver = reader(artifact()).read(obj, A10G)  # whatever the delivery-mode Setting says
    assert isinstance(no_driver, Blocked) and "NodeDeliveryUnavailable" in no_driver.message
    sub = reader(artifact(), CSI).read(with_model(subPath="x"), A10G)
    assert isinstance(sub, Blocked) and "spec.additionalVolumes[0].subPath" in sub.message


def test_a_claim_artifact_mounts_its_path_read_only_on_the_volumes_node() -> None:
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
        ]
    }
    claim = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "weights", "namespace": "team-a"},
        "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "pv-1"},
        "status": {"phase": "Bound"},
    }
    pv = {
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-1"},
        "spec": {"nodeAffinity": {"required": selector}},
    }
    source = {"persistentVolumeClaim": {"claimName": "weights", "path": "qwen"}}
    obj = with_model()
    facts = reader(artifact(source), claim, pv).read(obj, A10G)
    assert isinstance(facts, PodFacts) and facts.node_affinity == selector
    pod = render_pod(obj, facts)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "additional-0")
    assert volume["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    assert {"name": "additional-0", "mountPath": "/model", "readOnly": True, "subPath": "qwen"} in main[
        "volumeMounts"
    ]
    assert (
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == selector
    )
