"""api.models: every kind parses a full object with its status, dumps back, and refuses with paths."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from api.models.instance_type import InstanceType
from api.models.kv_cache_pool import KVCachePoolBinding, KVCachePoolBindingStatus
from api.models.model_deployment import ModelDeployment, ModelDeploymentRoleStatus
from api.models.registry import KINDS, RESOURCES, ManifestError, dump, parse

DATA = Path(__file__).parent / "data"
REFUSALS = json.loads((DATA / "api_apiserver/refusals.json").read_text())


def _objects() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((DATA / "api_objects").glob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            out.append((f"{path.name}#{index}", document))
    return out


OBJECTS = _objects()


def _errors(document: dict) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as caught:
        parse(document)
    return caught.value.errors


def test_every_kind_has_a_full_object() -> None:
    assert {doc["kind"] for _, doc in OBJECTS} == {kind for _, kind in KINDS}
    assert len(KINDS) == 18


@pytest.mark.parametrize(("name", "document"), OBJECTS, ids=[n for n, _ in OBJECTS])
def test_full_object_round_trips(name: str, document: dict) -> None:
    model = parse(document)
    assert type(model) is KINDS[(document["apiVersion"], document["kind"])]
    assert dump(model) == document


@pytest.mark.parametrize(("name", "document"), [o for o in OBJECTS if "status" in o[1]], ids=lambda v: v)
def test_full_object_status_is_typed(name: str, document: dict) -> None:
    model = parse(document)
    assert model.status is not None
    assert type(model).model_fields["status"].annotation is not None
    assert dump(model)["status"] == document["status"]


def test_instance_type_status_carries_the_four_views_and_summaries() -> None:
    document = dict(OBJECTS)["instancetype.yaml#0"]
    model = parse(document)
    assert isinstance(model, InstanceType)
    status = model.status
    assert status is not None
    assert (status.accelerator.remaining, status.accelerator_shared.remaining) == ("2", "27")
    assert (status.accelerator_sliced.capacity, status.accelerator_partitioned.capacity) == ("500", "0")
    assert status.accelerator_summary == "1/2 2/27 100/270 0/0"
    assert (status.unit_summary, status.cpu_summary) == ("8/64Gi/100Gi", "48/72")
    assert status.detail is not None and status.detail.manufacturer == "nvidia"


def test_omitempty_zeros_drop_and_pointer_zeros_stay() -> None:
    instance_type = copy.deepcopy(dict(OBJECTS)["instancetype.yaml#0"])
    instance_type["spec"]["inactive"] = False
    assert "inactive" not in dump(parse(instance_type))["spec"]
    instance_type["spec"]["inactive"] = True
    assert dump(parse(instance_type))["spec"]["inactive"] is True

    binding = dict(OBJECTS)["kvcachepoolbinding.yaml#0"]
    status = dump(parse(binding))["status"]
    assert (status["overQuota"], status["blocks"], status["effectiveQuota"]) == (False, 0, "0")
    router = dump(parse(dict(OBJECTS)["modeldeployment.yaml#0"]))["spec"]["router"]
    assert router["disaggregationThresholdTokens"] == 0


def test_required_go_values_are_dumped_even_when_zero() -> None:
    role = ModelDeploymentRoleStatus(
        name="decode", desired=0, ready=0, quota_reserved=0, unmanaged=False, kind="Decode"
    )
    assert dump(role) == {
        "name": "decode",
        "desired": 0,
        "ready": 0,
        "quotaReserved": 0,
        "unmanaged": False,
        "kind": "Decode",
    }
    assert dump(KVCachePoolBindingStatus()) == {}


def test_programmatic_objects_fill_their_identity() -> None:
    binding = KVCachePoolBinding.model_validate(
        {
            "metadata": {"name": "b", "namespace": "n"},
            "spec": {
                "poolRef": {"name": "p"},
                "quota": {"ceiling": "1Gi"},
                "domain": {"blockSize": 16, "dtype": "fp8_e4m3"},
            },
        }
    )
    out = dump(binding)
    assert (out["apiVersion"], out["kind"]) == ("worker.gpustack.ai/v1", "KVCachePoolBinding")
    assert "name" not in out["spec"]["domain"]
    assert binding.spec.domain.name == "default"


def test_metadata_is_lenient() -> None:
    document = copy.deepcopy(dict(OBJECTS)["modelstore.yaml#0"])
    document["metadata"].update(
        uid="0b6e",
        resourceVersion="42",
        generation=3,
        creationTimestamp="2026-03-01T08:00:00Z",
        finalizers=["x/y"],
    )
    assert dump(parse(document))["metadata"] == document["metadata"]


@pytest.mark.parametrize("case", sorted(REFUSALS), ids=str)
def test_refusal_paths_match_the_apiserver(case: str) -> None:
    paths = sorted({path for path, _ in _errors(REFUSALS[case]["document"])})
    assert paths == REFUSALS[case]["paths"]


def test_refusals_name_the_field_and_the_fix() -> None:
    document = copy.deepcopy(REFUSALS["bad-unknown"]["document"])
    assert _errors(document) == [
        ("spec.roles[0].template", "field not declared in schema; remove it or correct its spelling")
    ]
    document = copy.deepcopy(REFUSALS["bad-enum"]["document"])
    assert _errors(document) == [
        (
            "spec.roles[0].kind",
            'Unsupported value: "decoder": supported values: "Server", "Prefill", "Decode"',
        )
    ]
    document = copy.deepcopy(REFUSALS["bad-max"]["document"])
    assert _errors(document) == [
        ("spec.roles[0].replicas", "Invalid value: 2000: should be less than or equal to 1024")
    ]


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (
            lambda d: d["spec"]["resources"].update(acceleratorSlicedMemoryPercentage=120),
            "spec.resources.acceleratorSlicedMemoryPercentage",
        ),
        (lambda d: d["spec"]["resources"].update(accelerator=1.5), "spec.resources.accelerator"),
        (lambda d: d["spec"].update(imagePullPolicy="Sometimes"), "spec.imagePullPolicy"),
        (lambda d: d["spec"].update(volumeMount="relative/path"), "spec.volumeMount"),
        (lambda d: d["spec"]["volume"]["ephemeral"].update(size="1Gi"), "spec.volume.ephemeral.size"),
        (lambda d: d["spec"].update(displayName="x" * 65), "spec.displayName"),
        (lambda d: d["spec"].pop("type"), "spec.type"),
        (lambda d: d["spec"].update(stop="yes"), "spec.stop"),
    ],
)
def test_instance_refusals(mutate, path: str) -> None:
    document = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "examples/61-instance-sliced-demo.yaml").read_text()
    )
    mutate(document)
    assert [p for p, _ in _errors(document)] == [path]


def test_wrong_api_version_and_unknown_kind() -> None:
    document = copy.deepcopy(dict(OBJECTS)["setting.yaml#0"])
    document["apiVersion"] = "worker.gpustack.ai/v1"
    assert [p for p, _ in _errors(document)] == ["apiVersion"]
    assert [p for p, _ in _errors({"apiVersion": "v1", "kind": "ConfigMap"})] == ["kind"]
    assert [p for p, _ in _errors({"kind": "Setting"})] == ["apiVersion"]


def test_manifest_error_reads_like_the_apiserver() -> None:
    with pytest.raises(ManifestError) as caught:
        parse(REFUSALS["bad-dup"]["document"])
    assert (
        str(caught.value)
        == 'ModelDeployment "bad-dup" is invalid: spec.roles[1]: Duplicate value: {"name":"server"}'
    )


def test_every_resource_class_is_registered_once() -> None:
    assert len(RESOURCES) == len(set(RESOURCES)) == len(KINDS)
    assert all(cls.__crd__.plural == cls.__crd__.plural.lower() for cls in RESOURCES)


# --- Properties ------------------------------------------------------------------------------------

role_names = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
quantities = st.one_of(
    st.integers(min_value=0, max_value=64),
    st.from_regex(r"\A[0-9]{1,4}(m|Ki|Mi|Gi)?\Z"),
)
roles = st.fixed_dictionaries(
    {"name": role_names, "instanceType": st.from_regex(r"\A[a-z0-9-]{1,40}\Z")},
    optional={
        "kind": st.sampled_from(["Server", "Prefill", "Decode"]),
        "replicas": st.integers(min_value=1, max_value=1024),
        "size": st.integers(min_value=1, max_value=64),
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "accelerator": quantities,
                "acceleratorSlicedMemoryPercentage": st.integers(1, 100),
                "interface": quantities,
            },
        ),
        "extraArgs": st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4),
        "env": st.lists(
            st.fixed_dictionaries({"name": st.from_regex(r"\A[A-Z_]{1,12}\Z"), "value": st.text(max_size=8)}),
            min_size=1,
            max_size=3,
            unique_by=lambda e: e["name"],
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(roles, min_size=1, max_size=5, unique_by=lambda r: r["name"]),
    st.sampled_from(["vLLM", "SGLang"]),
)
def test_deployments_round_trip(generated_roles: list[dict], engine: str) -> None:
    """Lists are generated non-empty: an empty omitempty list is dropped on dump, as Go drops it."""
    document = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "generated", "namespace": "team-a"},
        "spec": {
            "model": {"name": "m"},
            "engine": {"name": engine, "version": "1"},
            "roles": generated_roles,
        },
    }
    model = parse(document)
    assert isinstance(model, ModelDeployment)
    assert dump(model) == document


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.text(max_size=12), st.floats(allow_nan=False), st.booleans(), st.none()))
def test_replicas_are_judged_alike_by_model_and_schema(replicas: object) -> None:
    from api.schema import judge

    document = copy.deepcopy(REFUSALS["bad-max"]["document"])
    document["spec"]["roles"][0]["replicas"] = replicas
    try:
        parse(document)
        model_ok = True
    except ManifestError:
        model_ok = False
    schema_ok = not judge(document).errors
    if isinstance(replicas, float) and replicas.is_integer():
        return  # JSON has one number type; the apiserver reads 3.0 as the integer 3, strict Python does not
    assert model_ok == schema_ok
