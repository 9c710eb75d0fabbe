"""The worker's node features (§2.0, §3.1): gKey, its NodeFeature labels, the cpu-info rule."""

from __future__ import annotations

import pytest

from api import constants
from controllers.nodefeatures import render as r


@pytest.mark.parametrize(
    ("labels", "name", "key"),
    [
        (
            {r.CPU_VENDOR_LABEL: "AMD", r.CPU_FAMILY_LABEL: "25", r.CPU_ID_LABEL: "1"},
            "AMD EPYC 7763 64-Core Processor",
            "amd-epyc-7763",
        ),
        (
            {r.CPU_VENDOR_LABEL: "Intel"},
            "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz",
            "intel-xeon-platinum-8480",
        ),
        (
            {r.CPU_VENDOR_LABEL: "AMD", r.CPU_FAMILY_LABEL: "25", r.CPU_ID_LABEL: "1"},
            "@cpu.model.name",
            "amd-25-1",
        ),
        ({r.CPU_VENDOR_LABEL: "ARM", r.CPU_FAMILY_LABEL: "8", r.CPU_ID_LABEL: "3340"}, "", "arm-8-3340"),
        ({}, "", "generic"),
    ],
)
def test_general_key(labels: dict, name: str, key: str) -> None:
    assert r.general_key(labels, {r.CPU_NAME_ANNOTATION: name} if name else {}) == key


def node(labels: dict, cpu: str = "64") -> dict:
    return {"metadata": {"name": "n1", "uid": "u1", "labels": labels}, "status": {"capacity": {"cpu": cpu}}}


def test_worker_labels_managed_general_group_and_count() -> None:
    labels = r.worker_labels(
        node({r.CPU_VENDOR_LABEL: "AMD", r.CPU_FAMILY_LABEL: "25", r.CPU_ID_LABEL: "1"}),
        manual=False,
        mixed_on_node=True,
    )
    assert labels == {
        constants.LABEL_MANAGED: "true",
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-25-1": "true",
        "general.feature.gpustack.ai/amd-25-1.count": "64",
    }


def test_manual_management_leaves_managed_off_and_cpu_only_needs_mixed_off() -> None:
    bare = node({constants.LABEL_ACCELERATABLE: "false"}, cpu="4")
    assert constants.LABEL_MANAGED not in r.worker_labels(bare, manual=True, mixed_on_node=True)
    assert constants.LABEL_CPU_ONLY not in r.worker_labels(bare, manual=False, mixed_on_node=True)
    assert r.worker_labels(bare, manual=False, mixed_on_node=False)[constants.LABEL_CPU_ONLY] == "true"
    accelerated = node({constants.LABEL_ACCELERATABLE: "true"})
    assert constants.LABEL_CPU_ONLY not in r.worker_labels(accelerated, manual=False, mixed_on_node=False)


def test_cpu_info_rule_matches_the_managed_vendors_in_the_acceleratable_classes() -> None:
    rule = r.cpu_info_rule(["10de", "1002"])
    detect = rule["spec"]["rules"][1]["matchFeatures"][0]["matchExpressions"]
    assert detect["vendor"] == {"op": "In", "value": ["1002", "10de"]}
    assert detect["class"]["value"] == ["^02", "^03", "^0b", "^12"]
    assert rule["spec"]["rules"][2]["labels"] == {constants.LABEL_ACCELERATABLE: "false"}
    assert (
        rule["spec"]["rules"][0]["annotations"]["feature.gpustack.ai/cpu-logical-cores"]
        == "@cpu.model.logical_cores"
    )
