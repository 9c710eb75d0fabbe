"""The chart's per-component Pod values (issue 33, item 2), rendered by the cluster build's helm:
today's hardened defaults, what each new value changes, the Settings seeds from ``global.*``, and
the schema's refusals of the new values."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from api import settings
from tests.unit.test_chart import (  # noqa: F401  (dependencies: the autouse fixture packaging the subcharts)
    CHART,
    NS,
    by_kind,
    container,
    dependencies,
    env_of,
    helm,
    pytestmark,
    render,
)

DEVICE_MANAGER = "gpustack-operator-device-manager-nvidia"
MODEL_MANAGER = "gpustack-operator-model-manager"
WORKER = "gpustack-operator-worker"
HOOKS = ("gpustack-operator-cleanup-before-kueue", "gpustack-operator-cleanup-webhooks")
IMAGE_SEEDS = ("container-registry", "container-namespace", "image-pull-secrets", "image-pull-policy")


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Pod templates of the worker, a device manager, the model manager and the default hooks."""
    workloads = {**by_kind(docs, "Deployment"), **by_kind(docs, "DaemonSet"), **by_kind(docs, "Job")}
    return {
        name: workloads[name]["spec"]["template"] for name in (WORKER, DEVICE_MANAGER, MODEL_MANAGER, *HOOKS)
    }


def test_the_defaults_keep_todays_hardened_pods() -> None:
    templates = pods(render())
    worker, agent, models = templates[WORKER], templates[DEVICE_MANAGER], templates[MODEL_MANAGER]
    hardened_pod = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    hardened = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for name in (WORKER, *HOOKS):
        assert templates[name]["spec"]["securityContext"] == hardened_pod, name
        assert templates[name]["spec"]["containers"][0]["securityContext"] == hardened, name
    root = {"privileged": True, "runAsUser": 0, "runAsNonRoot": False}
    for agent_pod in (agent, models):
        assert "securityContext" not in agent_pod["spec"]
        assert agent_pod["spec"]["containers"][0]["securityContext"] == root
        assert agent_pod["spec"]["priorityClassName"] == "system-node-critical"
        assert "affinity" not in agent_pod["spec"]
    assert worker["spec"]["priorityClassName"] == "system-cluster-critical"
    assert "hostNetwork" not in worker["spec"] and "dnsPolicy" not in worker["spec"]
    assert worker["spec"]["containers"][0]["startupProbe"] == {
        "httpGet": {"path": "/livez", "port": "https", "scheme": "HTTPS"},
        "periodSeconds": 5,
        "failureThreshold": 60,
    }
    for name in HOOKS:
        assert "priorityClassName" not in templates[name]["spec"]
        assert "resources" not in templates[name]["spec"]["containers"][0]
        assert not templates[name]["metadata"].get("annotations")
    assert all(not t["metadata"].get("annotations") for t in templates.values())


def test_each_component_takes_its_pod_values() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "example.com/no-agents", "operator": "DoesNotExist"}]}
                ]
            }
        }
    }
    own = {
        "priorityClassName": "ops-high",
        "podAnnotations": {"example.com/owner": "ml", "example.com/count": 3},
        "podLabels": {"team": "ml", "app.kubernetes.io/component": "not-mine"},
        "podSecurityContext": {"fsGroup": 2000},
        "securityContext": {"readOnlyRootFilesystem": None, "runAsGroup": 3000},
    }
    docs = render(
        {
            "worker": {**own, "hostNetwork": True, "startupProbe": {"failureThreshold": 120}},
            "deviceManager": {**own, "affinity": affinity},
            "modelManager": {**own, "affinity": affinity},
            "cleanup": {
                **own,
                "affinity": affinity,
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
            },
        }
    )
    templates = pods(docs)
    for name, template in templates.items():
        spec, labels = template["spec"], template["metadata"]["labels"]
        assert spec["priorityClassName"] == "ops-high", name
        assert template["metadata"]["annotations"] == {"example.com/owner": "ml", "example.com/count": "3"}, (
            name
        )
        assert labels["team"] == "ml" and labels["app.kubernetes.io/component"] != "not-mine", name
        assert spec["securityContext"]["fsGroup"] == 2000, name
        assert spec["containers"][0]["securityContext"]["runAsGroup"] == 3000, name
        assert spec["containers"][0]["securityContext"].get("readOnlyRootFilesystem") is None, (
            name
        )  # null: unset
        if name != WORKER:
            assert spec["affinity"] == affinity, name
    worker = templates[WORKER]["spec"]
    assert worker["hostNetwork"] is True and worker["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert worker["containers"][0]["startupProbe"]["failureThreshold"] == 120  # merged over the default
    assert worker["securityContext"]["runAsUser"] == 65532  # the defaults stay under a partial override
    # The selectors still find the Pods: the chart's own labels won the clash.
    for kind, name in (("Deployment", WORKER), ("DaemonSet", DEVICE_MANAGER), ("DaemonSet", MODEL_MANAGER)):
        workload = by_kind(docs, kind)[name]
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items(), name
    for name in HOOKS:
        assert templates[name]["spec"]["containers"][0]["resources"] == {
            "requests": {"cpu": "50m", "memory": "128Mi"}
        }


def test_none_of_the_optional_pod_fields_when_emptied() -> None:
    empty = {"priorityClassName": "", "podSecurityContext": None, "securityContext": None}
    templates = pods(
        render(
            {
                "worker": {**empty, "startupProbe": None},
                "deviceManager": empty,
                "modelManager": empty,
                "cleanup": empty,
            }
        )
    )
    for name, template in templates.items():
        assert "priorityClassName" not in template["spec"], name
        assert "securityContext" not in template["spec"], name
        assert "securityContext" not in template["spec"]["containers"][0], name
    assert "startupProbe" not in templates[WORKER]["spec"]["containers"][0]


def test_global_image_values_seed_the_settings_of_the_images_the_operator_starts() -> None:
    """The registry, namespace, pull secrets and policy reach the worker as GPUSTACK_<SETTING> seeds
    (operations spec D.8), unless worker.env seeds the same Setting; unset, no seed at all."""
    seeds = {settings.env_name(name) for name in IMAGE_SEEDS}
    assert all(settings.definition(name) for name in IMAGE_SEEDS)  # Settings the registry knows
    assert not seeds & set(env_of(by_kind(render(), "Deployment")[WORKER]))
    docs = render(
        {
            "global": {
                "imageRegistry": "registry.example.com:5000/",
                "imageNamespace": "mirror",
                "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}],
                "imagePullPolicy": "Always",
            },
            "worker": {"env": {"GPUSTACK_IMAGE_PULL_POLICY": "Never"}},
        }
    )
    worker = by_kind(docs, "Deployment")[WORKER]
    env = env_of(worker)
    assert {name: env[settings.env_name(name)] for name in IMAGE_SEEDS} == {
        "container-registry": "registry.example.com:5000",
        "container-namespace": "mirror",
        "image-pull-secrets": "regcred,other",
        "image-pull-policy": "Never",  # worker.env's, once
    }
    names = [e["name"] for e in container(worker)["env"]]
    assert len(names) == len(set(names))
    for name in IMAGE_SEEDS:  # every seed passes the Setting's own check (else the worker exits 2)
        assert settings.definition(name).validator(env[settings.env_name(name)]) is None
    assert container(worker)["image"] == "registry.example.com:5000/mirror/gpustack-operator-py:v0.1.0"
    for name, template in pods(docs).items():
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}], name


def test_the_registry_pattern_is_the_settings() -> None:
    """global.imageRegistry is refused by the schema where the Setting container-registry would refuse
    its seed (and the worker exit 2), a trailing slash aside (the chart trims it)."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    pattern = re.compile(schema["properties"]["global"]["properties"]["imageRegistry"]["pattern"])
    for value in (
        "",
        "registry.example.com",
        "registry.example.com:5000",
        "registry.example.com:5000/",
        "localhost:5000/mirror/deep",
        "https://registry.example.com",
        "registry.example.com/UPPER",
        "registry example.com",
        "registry.example.com//x",
    ):
        assert (pattern.fullmatch(value) is not None) == (
            settings.registry(value.removesuffix("/")) is None
        ), value


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"worker": {"hostNetwork": "yes"}}, "at '/worker/hostNetwork': got string, want boolean"),
        ({"deviceManager": {"priorityClassName": 5}}, "at '/deviceManager/priorityClassName'"),
        ({"modelManager": {"podLabels": {"team": ["ml"]}}}, "at '/modelManager/podLabels/team'"),
        ({"cleanup": {"resources": {"request": {}}}}, "additional properties 'request' not allowed"),
        ({"worker": {"startupProbe": "on"}}, "at '/worker/startupProbe': got string, want object"),
        ({"cleanup": {"podSecurityContext": []}}, "at '/cleanup/podSecurityContext'"),
        ({"global": {"imageRegistry": "https://registry.example.com"}}, "at '/global/imageRegistry'"),
    ],
)
def test_the_schema_refuses_a_wrong_pod_value_naming_it(values: dict[str, Any], said: str) -> None:
    refused = helm("template", "gpustack-operator", str(CHART), "--namespace", NS, values=values, check=False)
    assert refused.returncode != 0 and said in refused.stderr, refused.stderr
