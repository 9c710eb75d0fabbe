"""api.crds: deterministic, structural CRDs that match the committed chart files.

The generated CRDs were also applied with ``kubectl apply --server-side`` to a v1.36.3 apiserver,
became Established, and refused each frozen-field edit with its rule's message (see the report of the
change that added this file); these tests hold the properties that made that so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from api import crds
from api.models.registry import KINDS

ROOT = Path(__file__).resolve().parents[2]
CHART_CRDS = ROOT / "charts/gpustack-operator/crds"
ALL = crds.render_all()
BY_KIND = {c["spec"]["names"]["kind"]: c for c in ALL}


def _schema(kind: str) -> dict:
    return BY_KIND[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _at(kind: str, *path: str) -> dict:
    node = _schema(kind)
    for step in path:
        node = node["items"] if step == "[]" else node["properties"][step]
    return node


def _rules(node: dict) -> dict[str, str]:
    return {r["rule"]: r["message"] for r in node.get("x-kubernetes-validations", [])}


def test_generation_is_deterministic() -> None:
    assert crds.render_all() == ALL
    assert crds.render_yaml() == crds.render_yaml()
    assert [c["metadata"]["name"] for c in ALL] == sorted(c["metadata"]["name"] for c in ALL)


def test_committed_crds_equal_a_fresh_generation() -> None:
    stale = crds.differences(CHART_CRDS)
    assert not stale, f"charts/gpustack-operator/crds is stale ({', '.join(stale)}); run: {crds.REGENERATE}"


def test_yaml_stream_parses_back() -> None:
    assert list(yaml.safe_load_all(crds.render_yaml())) == ALL


def test_check_mode(tmp_path: Path) -> None:
    assert crds.main(["--check", str(CHART_CRDS)]) == 0
    assert crds.main(["--check", str(tmp_path)]) == 1
    crds.write(tmp_path)
    (tmp_path / "old.worker.gpustack.ai.yaml").write_text("stale")
    assert crds.main(["--check", str(tmp_path)]) == 1
    crds.write(tmp_path)
    assert crds.main(["--check", str(tmp_path)]) == 0


@pytest.mark.parametrize("crd", ALL, ids=lambda c: c["metadata"]["name"])
def test_structural(crd: dict) -> None:
    assert crds.structural_problems(crd) == []
    text = crds._yaml(crd)
    assert "$ref" not in text
    version = crd["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in version] == [("v1", True, True)]
    assert version[0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] == {"type": "object"}


def test_every_kind_has_a_crd_with_its_names() -> None:
    assert {(c["spec"]["group"] + "/v1", kind) for kind, c in BY_KIND.items()} == set(KINDS)
    short = {kind: c["spec"]["names"].get("shortNames", []) for kind, c in BY_KIND.items()}
    assert short == {
        "Devices": ["devs"],
        "Instance": ["inst"],
        "InstanceSSHPublicKey": [],
        "InstanceImagePullSecret": [],
        "InstancePersistentVolume": [],
        "InstanceType": ["instype"],
        "InstanceTypeFlavor": ["instypeflavor"],
        "KVCacheBackend": ["kvcb"],
        "KVCachePool": ["kvcp"],
        "KVCachePoolBinding": ["kvcpb"],
        "ModelArtifact": ["mart"],
        "ModelDeployment": ["md"],
        "ModelPrefetch": ["mpf"],
        "ModelStore": ["ms"],
        "ModelStoreBinding": ["msb"],
        "NodeModelStore": ["nms"],
        "Setting": ["set"],
        "TopologySource": ["toposrc"],
    }
    scopes = {kind: c["spec"]["scope"] for kind, c in BY_KIND.items()}
    assert {k for k, s in scopes.items() if s == "Namespaced"} == {
        "Instance",
        "InstanceSSHPublicKey",
        "InstanceImagePullSecret",
        "InstancePersistentVolume",
        "ModelArtifact",
        "ModelDeployment",
        "ModelPrefetch",
        "ModelStoreBinding",
        "KVCachePoolBinding",
        "Setting",
    }
    assert BY_KIND["Setting"]["spec"]["group"] == "gpustack.ai"
    assert all(c["spec"]["names"].get("categories") == ["gpustack"] for c in BY_KIND.values())
    no_status = {k for k, c in BY_KIND.items() if "subresources" not in c["spec"]["versions"][0]}
    assert no_status == {"InstanceSSHPublicKey", "InstanceImagePullSecret", "InstanceTypeFlavor"}


def test_printer_columns() -> None:
    def columns(kind: str) -> list[tuple[str, str, int]]:
        version = BY_KIND[kind]["spec"]["versions"][0]
        return [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]

    assert columns("InstanceType") == [
        ("Entrance", ".status.entrance", 0),
        ("Unit(CPU/RAM)/Storage", ".status.unitSummary", 0),
        ("Accelerator(EX/SH/SL/PT)", ".status.acceleratorSummary", 0),
        ("CPU", ".status.cpuSummary", 0),
        ("Phase", ".status.phase", 0),
        ("Age", ".metadata.creationTimestamp", 0),
        ("Partitions", ".status.acceleratorPartitioned.remainingProfiles", 1),
    ]
    assert [c[0] for c in columns("Instance")] == ["Phase", "Type", "Node", "Age"]
    assert [c[0] for c in columns("ModelDeployment")][:4] == ["Engine", "Roles", "Phase", "Endpoint"]
    assert [(c[0], c[2]) for c in columns("Devices")] == [("Age", 0), ("Groups", 1)]
    assert ("Endpoint", ".status.endpoints[?(@.name=='Client')].address", 0) in columns("KVCacheBackend")
    assert [c[0] for c in columns("TopologySource")] == ["Kind", "Revision", "Ready", "Age"]


def test_every_kind_shows_its_age() -> None:
    for kind, crd in BY_KIND.items():
        version = crd["spec"]["versions"][0]
        ages = [c for c in version["additionalPrinterColumns"] if c["name"] == "Age"]
        assert ages == [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}], kind


# Short names already taken by the core and by operators often installed beside this one.
TAKEN = {
    "core": {"cj", "cm", "crd", "crds", "cs", "csr", "deploy", "ds", "ep", "ev", "hpa", "ing", "limits"}
    | {"netpol", "no", "ns", "pc", "pdb", "po", "pv", "pvc", "quota", "rc", "rs", "sa", "sc", "sts", "svc"},
    "cluster-api": {"cc", "cl", "kcp", "ma", "md", "mhc", "mp", "ms"},
    "kueue": {"ac", "cq", "flavor", "flavors", "lq", "queue", "queues", "rf", "wl"},
    "kserve": {"ig", "isvc", "tm"},
    "kubevirt": {"dv", "dvs", "vm", "vmi", "vmis", "vms"},
    "istio": {"dr", "gw", "pa", "se", "vs"},
    "cert-manager": {"cert", "certs", "cr", "crs"},
    "prometheus-operator": {"am", "pmon", "prom", "promrule", "smon"},
    "argo": {"app", "appproj", "appprojs", "apps", "cwf", "cwftmpl", "wf", "wftmpl"},
    "knative": {"kcfg", "kroute", "ksvc", "rev"},
    "volcano": {"pg", "podgroup", "q", "vcjob", "vj"},
    "leaderworkerset": {"lws"},
}
# Clashes kept on purpose: the reference names these kinds so (docs/kubectl.md).
KEPT = {"md": "cluster-api", "ms": "cluster-api"}


def test_short_names_clash_only_where_the_reference_chose_so() -> None:
    ours = [(name, kind) for kind, c in BY_KIND.items() for name in c["spec"]["names"].get("shortNames", [])]
    assert len({name for name, _ in ours}) == len(ours), "two kinds share a short name"
    clashes = {name: owner for name, _ in ours for owner, names in TAKEN.items() if name in names}
    assert clashes == KEPT


def test_quantities_are_int_or_string() -> None:
    node = _at("ModelDeployment", "spec", "roles", "[]", "resources", "accelerator")
    assert node["x-kubernetes-int-or-string"] is True
    assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert "type" not in node and node["pattern"].startswith("^(\\+|-)?")


def test_nullable_only_where_declared() -> None:
    found = []
    for kind, crd in BY_KIND.items():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        found += [(kind, path) for path, node in crds._walk(schema, "") if node.get("nullable")]
    assert found == [("Instance", ".spec.resources.accelerator")]


def test_list_semantics() -> None:
    groups = _at("Devices", "spec", "groups")
    assert (groups["x-kubernetes-list-type"], groups["x-kubernetes-list-map-keys"]) == (
        "map",
        ["id", "manufacturer"],
    )
    ports = _at("Instance", "spec", "ports")
    assert ports["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"
    roles = _at("ModelDeployment", "spec", "roles")
    assert (roles["x-kubernetes-list-type"], roles["minItems"], roles["maxItems"]) == ("map", 1, 16)
    assert (
        _at("KVCacheBackend", "spec", "connection", "managed", "members")["x-kubernetes-list-type"]
        == "atomic"
    )
    assert _at("KVCacheBackend", "status", "usedBy")["x-kubernetes-list-map-keys"] == [
        "kind",
        "namespace",
        "name",
    ]
    assert _at("TopologySource", "spec", "levels")["maxItems"] == 16


def test_defaults_enums_and_bounds() -> None:
    role = _at("ModelDeployment", "spec", "roles", "[]")["properties"]
    assert (role["kind"]["default"], role["kind"]["enum"]) == ("Server", ["Server", "Prefill", "Decode"])
    assert (role["replicas"]["default"], role["replicas"]["minimum"], role["replicas"]["maximum"]) == (
        1,
        1,
        1024,
    )
    assert (role["size"]["minimum"], role["size"]["maximum"]) == (1, 64)
    assert role["name"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    assert _at("KVCacheBackend", "spec", "transport")["default"] == {}
    assert _at("KVCacheBackend", "spec", "transport", "protocol")["default"] == "Auto"
    assert _at("KVCachePoolBinding", "spec", "domain", "name")["default"] == "default"
    leader = _at("KVCacheBackend", "spec", "connection", "managed", "leader")["properties"]
    assert (leader["replicas"]["maximum"], leader["multiTenancy"]["default"]) == (5, True)
    assert _at("NodeModelStore", "spec", "watermarks", "highPercent")["maximum"] == 95
    assert _at("Instance", "spec", "volumeMount")["default"] == "/workspace"


def test_frozen_fields_have_transition_rules_with_directions() -> None:
    spec = _rules(_at("InstanceType", "spec"))
    frozen = {rule.split(".")[1].split(" ")[0].split(")")[0] for rule in spec}
    assert frozen == {
        "acceleratorGroup",
        "generalGroup",
        "acceleratable",
        "os",
        "arch",
        "unitResources",
        "localStorage",
    }
    assert all(
        "only spec.displayName, spec.description and spec.inactive may change" in m for m in spec.values()
    )
    role = _rules(_at("ModelDeployment", "spec", "roles", "[]"))
    assert role["self.size == oldSelf.size"] == (
        "size is fixed at creation; change replicas, or create a new deployment for another size"
    )
    binding = _rules(_at("KVCachePoolBinding", "spec"))
    assert set(binding) == {"self.poolRef == oldSelf.poolRef", "self.domain == oldSelf.domain"}
    assert set(_rules(_at("KVCachePool", "spec"))) == {"self.backends == oldSelf.backends"}
    assert "create another ModelArtifact" in _rules(_at("ModelArtifact", "spec"))["self == oldSelf"]
    for messages in (spec, role, binding):
        assert all(("create" in m or "change replicas" in m) for m in messages.values())


def test_strings_compared_by_cel_are_bounded() -> None:
    """CEL cost is estimated from maxLength/maxItems; unbounded strings under a rule would exceed it."""
    for field in ("acceleratorGroup", "os", "arch", "localStorage", "description"):
        assert "maxLength" in _at("InstanceType", "spec", field)
    assert _at("ModelDeployment", "spec", "roles", "[]", "command")["maxItems"] == 128
    assert _at("ModelDeployment", "spec", "roles", "[]", "command", "[]")["maxLength"] == 8192
    assert _at("KVCachePool", "spec", "backends", "[]")["maxLength"] == 253
