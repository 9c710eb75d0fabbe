"""Webhook scope as the apiserver holds it: only the core Pod entries skip namespaces (the
operator's own and kube-system); our own kinds are judged everywhere, so A.5's refusal of an
Instance in a reserved namespace fires through kubectl."""

from __future__ import annotations

import json

import pytest

from webhooks import registry

pytestmark = pytest.mark.e2e


def test_only_pod_entries_skip_namespaces(cluster, webhooks):
    for kind, name in (
        ("mutatingwebhookconfiguration", registry.MUTATING_CONFIGURATION),
        ("validatingwebhookconfiguration", registry.VALIDATING_CONFIGURATION),
    ):
        stored = cluster.kubectl_json("get", kind, name)
        for entry in stored["webhooks"]:
            resources = {r for rule in entry["rules"] for r in rule["resources"]}
            if resources == {"pods"}:
                (expression,) = entry["namespaceSelector"]["matchExpressions"]
                assert expression["operator"] == "NotIn"
                assert sorted(expression["values"]) == ["gpustack-system", "kube-system"], entry["name"]
            else:
                assert entry["namespaceSelector"] == {}, entry["name"]


def test_an_instance_in_the_operator_namespace_is_refused(cluster, webhooks):
    instance = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "in-system", "namespace": "gpustack-system"},
        # Created stopped, so no InstanceType need exist: the namespace alone is refused.
        "spec": {"type": "gpustack--generic-linux-amd64", "image": "ubuntu:24.04", "stop": True},
    }
    created = cluster.kubectl("create", "-f", "-", input=json.dumps(instance), check=False)
    assert created.returncode != 0
    assert 'The Instance "in-system" is invalid' in created.stderr, created.stderr
    assert "metadata.namespace" in created.stderr and "system namespace" in created.stderr
