"""api.schema: structural defaulting and validation, judged against a real apiserver's answers.

``data/api_apiserver/defaulted_objects.json`` is what a v1.36.3 kube-apiserver stored for each full
object of ``data/api_objects`` (spec through the main resource, status through the status
subresource); ``refusals.json`` is what it refused, and at which paths.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from api.schema import apply_defaults, judge, schema_for, validate

DATA = Path(__file__).parent / "data"
STORED = json.loads((DATA / "api_apiserver/defaulted_objects.json").read_text())
REFUSALS = json.loads((DATA / "api_apiserver/refusals.json").read_text())
BACKEND = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "KVCacheBackend",
    "metadata": {"name": "b"},
    "spec": {
        "connection": {
            "managed": {
                "leader": {},
                "members": [{"nodeSelector": {}, "medium": "DRAM", "capacityPerMember": "8Gi"}],
            }
        }
    },
}


def _objects() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((DATA / "api_objects").glob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            out.append((f"{path.name}#{index}", document))
    return out


def _paths(document: dict) -> list[str]:
    return [e.path for e in judge(document).errors]


@pytest.mark.parametrize(("name", "document"), _objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_defaults_match_what_the_apiserver_stored(name: str, document: dict) -> None:
    defaulted = apply_defaults(document)
    for part, stored in STORED[name].items():
        assert defaulted[part] == stored
    assert validate(defaulted) == []


def test_defaults_descend_into_defaults() -> None:
    spec = apply_defaults(BACKEND)["spec"]
    assert spec["transport"] == {"protocol": "Auto"}
    assert spec["type"] == "Mooncake"
    assert spec["connection"]["managed"]["leader"] == {
        "replicas": 1,
        "electionBackend": "Kubernetes",
        "memberAddressing": "Service",
        "allocationStrategy": "FreeRatioFirst",
        "multiTenancy": True,
    }
    assert "scaleIn" not in spec["connection"]["managed"]  # an absent object gets no defaults


def test_defaults_reach_list_items_and_leave_the_input_alone() -> None:
    document = copy.deepcopy(REFUSALS["bad-max"]["document"])
    document["spec"]["roles"][0]["ports"] = [{"port": 8000}]
    before = copy.deepcopy(document)
    role = apply_defaults(document)["spec"]["roles"][0]
    assert document == before
    assert role["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert (role["kind"], role["size"]) == ("Server", 1)


def test_nulls_are_pruned_or_defaulted() -> None:
    document = copy.deepcopy(REFUSALS["bad-max"]["document"])
    document["spec"]["roles"][0].update(kind=None, image=None)
    role = apply_defaults(document)["spec"]["roles"][0]
    assert role["kind"] == "Server"
    assert "image" not in role


def test_metadata_is_the_apiservers() -> None:
    document = copy.deepcopy(BACKEND)
    document["metadata"] = {"name": "b", "anything": {"goes": 1}}
    judgement = judge(document)
    assert judgement.document["metadata"] == document["metadata"]
    assert judgement.errors == []


@pytest.mark.parametrize("case", sorted(REFUSALS), ids=str)
def test_refusal_paths_match_the_apiserver(case: str) -> None:
    assert sorted(set(_paths(REFUSALS[case]["document"]))) == REFUSALS[case]["paths"]


def test_messages() -> None:
    def messages(document: dict) -> list[str]:
        return [str(e) for e in judge(document).errors]

    assert messages(REFUSALS["bad-max"]["document"]) == [
        "spec.roles[0].replicas: Invalid value: 2000: should be less than or equal to 1024"
    ]
    assert messages(REFUSALS["bad-required"]["document"]) == ["spec.engine: Required value"]
    assert messages(REFUSALS["bad-toomany"]["document"]) == [
        "spec.roles: Too many: 17: must have at most 16 items"
    ]
    assert messages(REFUSALS["bad-long"]["document"]) == [
        "spec.model.name: Too long: may not be more than 253 bytes"
    ]


@pytest.mark.parametrize(
    ("mutate", "path", "reason"),
    [
        (
            lambda s: s["connection"]["managed"]["members"][0].update(medium="SSD"),
            "spec.connection.managed.members[0].medium",
            "FieldValueNotSupported",
        ),
        (
            lambda s: s["connection"]["managed"]["members"][0].update(capacityPerMember=True),
            "spec.connection.managed.members[0].capacityPerMember",
            "FieldValueTypeInvalid",
        ),
        (
            lambda s: s["connection"]["managed"]["leader"].update(replicas=6),
            "spec.connection.managed.leader.replicas",
            "FieldValueInvalid",
        ),
        (
            lambda s: s["connection"]["managed"].update(members=[]),
            "spec.connection.managed.members",
            "FieldValueInvalid",
        ),
        (
            lambda s: s["connection"]["managed"]["members"][0]["nodeSelector"].update(zone=3),
            "spec.connection.managed.members[0].nodeSelector[zone]",
            "FieldValueTypeInvalid",
        ),
        (
            lambda s: s["connection"].update(
                external={
                    "endpoints": [{"name": "Client", "address": "a:1"}, {"name": "Client", "address": "b:1"}]
                }
            ),
            "spec.connection.external.endpoints[1]",
            "FieldValueDuplicate",
        ),
        (lambda s: s.update(extra=1), "spec.extra", "FieldValueUnknown"),
        (
            lambda s: s["connection"]["managed"]["members"][0].update(
                localDisks=[{"path": "/a"}, {"path": "/b"}]
            ),
            "spec.connection.managed.members[0].localDisks",
            "FieldValueTooMany",
        ),
        (
            lambda s: s["connection"]["managed"]["members"][0].update(runtimeClassName="Not_A_Name"),
            "spec.connection.managed.members[0].runtimeClassName",
            "FieldValueInvalid",
        ),
    ],
)
def test_field_errors(mutate, path: str, reason: str) -> None:
    document = copy.deepcopy(BACKEND)
    mutate(document["spec"])
    errors = judge(document).errors
    assert [(e.path, e.reason) for e in errors] == [(path, reason)]


def test_status_times_and_condition_enums() -> None:
    document = copy.deepcopy(dict(_objects())["modelartifact.yaml#0"])
    document["status"]["resolved"]["resolvedTime"] = "yesterday"
    document["status"]["conditions"][0]["status"] = "Maybe"
    assert sorted(_paths(document)) == ["status.conditions[0].status", "status.resolved.resolvedTime"]


def test_kinds_we_do_not_serve_are_not_judged() -> None:
    judgement = judge({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    assert not judgement.served and not judgement.allowed
    assert schema_for("v1", "Pod") is None


def test_a_schema_can_be_given() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "maybe": {"type": "string", "nullable": True},
        },
    }
    document = {"tags": ["a", "a"], "ratio": 0, "raw": {"x": {"y": 1}}, "maybe": None}
    assert sorted((e.path, e.reason) for e in validate(document, schema)) == [
        ("ratio", "FieldValueInvalid"),
        ("tags[1]", "FieldValueDuplicate"),
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"\A[a-z]{1,8}\Z"),
        st.one_of(st.integers(-5, 5), st.text(max_size=4), st.booleans(), st.none()),
        max_size=3,
    )
)
def test_unknown_leader_fields_are_always_refused(extra: dict) -> None:
    known = {
        "replicas",
        "electionBackend",
        "memberAddressing",
        "allocationStrategy",
        "multiTenancy",
        "extraArgs",
        "extraEnv",
    }
    document = copy.deepcopy(BACKEND)
    document["spec"]["connection"]["managed"]["leader"] = dict(extra)
    paths = _paths(document)
    unknown = sorted(k for k in extra if k not in known)
    assert sorted(p.rsplit(".", 1)[1] for p in paths if p.rsplit(".", 1)[1] in unknown) == unknown
