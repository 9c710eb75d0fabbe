"""TopologySource admission (topology spec B.2), over HTTP through the worker's webhook app: the
spec's accepted and rejected examples for each of the eleven rules, CREATE and UPDATE alike, each
refusal naming its field path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from tests.webhooks.reviews import body
from webhooks import registry, server
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "20-topologysource-cloud-zones.yaml"
NS = "gpustack-system"
RACK = "topology.gpustack.ai/rack"
ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(scope="module")
def client():
    with TestClient(server.create_app(FileLookups())) as test_client:
        yield test_client


def _path() -> str:
    (hook,) = [w for w in registry.WEBHOOKS if w.kind == "TopologySource"]
    assert not hook.mutating and hook.scope == "Cluster" and hook.failure_policy == "Fail"
    assert hook.operations == ("CREATE", "UPDATE")
    return hook.path


def source(**spec: object) -> dict:
    base: dict = {"nodeSelector": {}, "levels": [ZONE], "nodeLabels": {}}
    base.update(spec)
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "TopologySource",
        "metadata": {"name": "s"},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def config_map(**arm: object) -> dict:
    base: dict = {"configMapRef": {"namespace": NS, "name": "inventory"}, "key": "snapshot.yaml"}
    base["maxStaleness"] = "10m"
    base.update(arm)
    return base


def webhook(**arm: object) -> dict:
    base: dict = {
        "url": "https://inventory.gpustack-system.svc/snapshot",
        "pollInterval": "1m",
        "timeout": "10s",
        "maxStaleness": "5m",
        "bearerTokenSecretRef": {"namespace": NS, "name": "token"},
    }
    base.update(arm)
    return {k: v for k, v in base.items() if v is not None}


def admit(client, obj: dict, operation: str = "CREATE") -> dict:
    old = copy.deepcopy(obj) if operation == "UPDATE" else None
    if old is not None:
        old["spec"] = source()["spec"]
    payload = body(
        obj,
        kind="TopologySource",
        group="worker.gpustack.ai",
        resource="topologysources",
        operation=operation,
        old=old,
    )
    response = client.post(_path(), content=payload, headers=JSON)
    assert response.status_code == 200
    return response.json()["response"]


def refused(client, obj: dict, field: str, reason: str, words: str = "") -> None:
    for operation in ("CREATE", "UPDATE"):
        answer = admit(client, obj, operation)
        assert not answer["allowed"], operation
        causes = answer["status"]["details"]["causes"]
        hits = [c for c in causes if c["field"] == field]
        assert hits, f"{operation}: {field} not among {[c['field'] for c in causes]}"
        assert hits[0]["reason"] == reason, hits[0]
        assert words in hits[0]["message"], hits[0]["message"]


def accepted(client, obj: dict) -> None:
    for operation in ("CREATE", "UPDATE"):
        answer = admit(client, obj, operation)
        assert answer["allowed"], answer.get("status")


def test_the_seed_and_each_arm_are_admitted(client) -> None:
    accepted(client, yaml.safe_load(EXAMPLE.read_text()))
    accepted(client, source(nodeLabels=None, configMap=config_map(), levels=[RACK]))
    accepted(client, source(nodeLabels=None, webhook=webhook(), levels=[RACK]))
    mtls = webhook(bearerTokenSecretRef=None, tlsClientCertificateSecretRef={"namespace": NS, "name": "c"})
    mtls["caBundleConfigMapRef"] = {"namespace": NS, "name": "ca"}
    accepted(client, source(nodeLabels=None, webhook=mtls, levels=[RACK]))
    accepted(
        client,
        source(
            nodeSelector={
                "matchExpressions": [{"key": "node-role.kubernetes.io/worker", "operator": "Exists"}]
            }
        ),
    )


def test_rule_1_levels_one_to_sixteen(client) -> None:
    refused(client, source(levels=[]), "spec.levels", "FieldValueRequired", "coarsest first")
    many = [f"topology.example.com/l{i}" for i in range(17)]
    refused(client, source(levels=many), "spec.levels", "FieldValueTooMany")
    accepted(client, source(levels=many[:16]))


def test_rule_2_a_level_is_a_label_key(client) -> None:
    refused(client, source(levels=["Zone Name"]), "spec.levels[0]", "FieldValueInvalid", "label key")
    refused(client, source(levels=[ZONE, "a/b/c"]), "spec.levels[1]", "FieldValueInvalid")


def test_rule_3_hostname_is_implicit(client) -> None:
    refused(
        client,
        source(levels=[ZONE, "kubernetes.io/hostname"]),
        "spec.levels[1]",
        "FieldValueForbidden",
        "implicitly",
    )


def test_rule_4_no_duplicate_level(client) -> None:
    refused(client, source(levels=[RACK, RACK]), "spec.levels[1]", "FieldValueDuplicate", "spec.levels[0]")


def test_rule_5_exactly_one_arm(client) -> None:
    refused(client, source(configMap=config_map()), "spec", "FieldValueInvalid", "exactly one source arm")
    refused(client, source(nodeLabels=None), "spec", "FieldValueInvalid", "exactly one source arm")


def test_rule_6_the_write_prefix(client) -> None:
    arm = {"nodeLabels": None, "configMap": config_map()}
    accepted(client, source(additionalWritePrefix="topology.example.com/", **arm))
    refused(
        client,
        source(additionalWritePrefix="rack.topology.gpustack.ai/", **arm),
        "spec.additionalWritePrefix",
        "FieldValueForbidden",
        "topology.gpustack.ai is reserved",
    )
    refused(
        client,
        source(additionalWritePrefix="example.com/racks/", **arm),
        "spec.additionalWritePrefix",
        "FieldValueInvalid",
        "trailing '/'",
    )
    for reserved in ("kubernetes.io/", "node.k8s.io/", "feature.gpustack.ai/", "fabric.topograph.run/"):
        refused(
            client,
            source(additionalWritePrefix=reserved, **arm),
            "spec.additionalWritePrefix",
            "FieldValueForbidden",
        )
    refused(
        client,
        source(additionalWritePrefix="example.com", **arm),
        "spec.additionalWritePrefix",
        "FieldValueInvalid",
    )


def test_rule_7_no_prefix_on_the_read_only_arm(client) -> None:
    refused(
        client,
        source(additionalWritePrefix="topology.example.com/"),
        "spec.additionalWritePrefix",
        "FieldValueForbidden",
        "writes nothing",
    )


def test_rule_8_references_stay_in_the_worker_namespace(client) -> None:
    refused(
        client,
        source(nodeLabels=None, configMap=config_map(configMapRef={"namespace": "team-a", "name": "inv"})),
        "spec.configMap.configMapRef.namespace",
        "FieldValueForbidden",
        NS,
    )
    for ref in ("caBundleConfigMapRef", "bearerTokenSecretRef"):
        arm = webhook(**{ref: {"namespace": "default", "name": "x"}})
        refused(
            client,
            source(nodeLabels=None, webhook=arm),
            f"spec.webhook.{ref}.namespace",
            "FieldValueForbidden",
        )
    arm = webhook(
        bearerTokenSecretRef=None, tlsClientCertificateSecretRef={"namespace": "kube-system", "name": "c"}
    )
    refused(
        client,
        source(nodeLabels=None, webhook=arm),
        "spec.webhook.tlsClientCertificateSecretRef.namespace",
        "FieldValueForbidden",
    )


def test_rule_9_an_absolute_https_url_without_credentials(client) -> None:
    for url, words in (
        ("http://inv/", "https"),
        ("https://u:p@inv/", "credentials"),
        ("https://inv/snapshot#top", "fragment"),
        ("inv/snapshot", "https"),
        ("https:///snapshot", "host"),
    ):
        refused(
            client,
            source(nodeLabels=None, webhook=webhook(url=url)),
            "spec.webhook.url",
            "FieldValueInvalid",
            words,
        )


def test_rule_10_positive_durations_and_a_timeout_within_the_poll(client) -> None:
    for field in ("pollInterval", "timeout", "maxStaleness"):
        for value in ("0s", "-1m", "soon"):
            refused(
                client,
                source(nodeLabels=None, webhook=webhook(**{field: value})),
                f"spec.webhook.{field}",
                "FieldValueInvalid",
            )
    refused(
        client,
        source(nodeLabels=None, configMap=config_map(maxStaleness="0")),
        "spec.configMap.maxStaleness",
        "FieldValueInvalid",
        "greater than zero",
    )
    refused(
        client,
        source(nodeLabels=None, webhook=webhook(timeout="2m", pollInterval="1m")),
        "spec.webhook.timeout",
        "FieldValueInvalid",
        "pollInterval",
    )
    accepted(client, source(nodeLabels=None, webhook=webhook(timeout="1m", pollInterval="1m")))


def test_rule_11_exactly_one_credential(client) -> None:
    refused(
        client,
        source(nodeLabels=None, webhook=webhook(bearerTokenSecretRef=None)),
        "spec.webhook",
        "FieldValueInvalid",
        "exactly one",
    )
    both = webhook(tlsClientCertificateSecretRef={"namespace": NS, "name": "c"})
    refused(client, source(nodeLabels=None, webhook=both), "spec.webhook", "FieldValueInvalid", "exactly one")


def test_a_blank_key_and_a_selector_that_does_not_parse(client) -> None:
    refused(
        client,
        source(nodeLabels=None, configMap=config_map(key="  ")),
        "spec.configMap.key",
        "FieldValueRequired",
    )
    bad = {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]}
    refused(
        client, source(nodeSelector=bad), "spec.nodeSelector.matchExpressions[0].values", "FieldValueInvalid"
    )
    refused(
        client,
        source(nodeSelector={"matchLabels": {"zone": "not a value"}}),
        "spec.nodeSelector.matchLabels[zone]",
        "FieldValueInvalid",
    )


def test_wrong_types_are_refusals_not_errors(client) -> None:
    for spec, field in (
        ({"levels": "topology.kubernetes.io/zone"}, "spec.levels"),
        ({"levels": [1]}, "spec.levels[0]"),
        ({"nodeLabels": []}, "spec.nodeLabels"),
        ({"nodeLabels": None, "webhook": {"url": 3}}, "spec.webhook.url"),
    ):
        answer = admit(client, source(**spec))
        assert not answer["allowed"]
        causes = answer["status"]["details"]["causes"]
        assert [c for c in causes if c["field"] == field and c["reason"] == "FieldValueTypeInvalid"], causes
