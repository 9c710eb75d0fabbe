"""controllers.modeldeployment.image: the runner image formula and its errors, in the spec's order
(model-deployment.md §8, §12.14)."""

from __future__ import annotations

import pytest

from controllers.modeldeployment.image import ImageError, image_for, runtime_versions, synthesize
from tests.unit.md_fixtures import instance_type


@pytest.mark.parametrize(
    ("manufacturer", "family", "runtime", "engine", "want"),
    [
        ("nvidia", "Ampere", "12.9", "vLLM", "gpustack/runner:cuda12.9-vllm0.29.0"),
        ("ascend", "910B", "9.0", "SGLang", "gpustack/runner:cann9.0-910b-sglang0.29.0"),
        ("ascend", "910C", "8.3", "vLLM", "gpustack/runner:cann8.3-a3-vllm0.29.0"),
        ("ascend", "310P", "8.2", "vLLM", "gpustack/runner:cann8.2-310p-vllm0.29.0"),
        ("ascend", "950", "9.1", "vLLM", "gpustack/runner:cann9.1-950-vllm0.29.0"),
        ("amd", "", "6.4", "vLLM", "gpustack/runner:rocm6.4-vllm0.29.0"),
        ("metax", "", "2.33", "vLLM", "gpustack/runner:maca2.33-vllm0.29.0"),
        ("mthreads", "", "4.1", "vLLM", "gpustack/runner:musa4.1-vllm0.29.0"),
        ("iluvatar", "", "4.2", "vLLM", "gpustack/runner:corex4.2-vllm0.29.0"),
        ("hygon", "", "25.04", "vLLM", "gpustack/runner:dtk25.04-vllm0.29.0"),
        ("thead", "", "1.5", "vLLM", "gpustack/runner:hggc1.5-vllm0.29.0"),
    ],
)
def test_formula(manufacturer, family, runtime, engine, want) -> None:
    it = instance_type(manufacturer=manufacturer, family=family, runtime=[runtime])
    assert synthesize(engine, "0.29.0", it, "server") == want


def test_the_lowest_runtime_version_of_the_pool() -> None:
    it = instance_type(runtime=["12.10", "12.8", "12.9"])
    assert synthesize("vLLM", "0.29.0", it, "server") == "gpustack/runner:cuda12.8-vllm0.29.0"
    versions = runtime_versions(it["status"]["detail"])
    assert versions is not None and versions.skewed and versions.reported == ("12.8", "12.9", "12.10")


@pytest.mark.parametrize(
    ("version", "it", "match", "transient"),
    [
        ("", instance_type(manufacturer=""), "engine.version is empty", False),
        ("0.29.0", instance_type(manufacturer=""), "manufacturer", True),
        ("0.29.0", instance_type(manufacturer="cambricon", runtime=[]), "cambricon", False),
        ("0.29.0", instance_type(manufacturer="ascend", family="910", runtime=[]), "910", False),
        ("0.29.0", instance_type(manufacturer="ascend", family="310B"), "310B", False),
        ("0.29.0", instance_type(runtime=[]), "runtime version", True),
    ],
)
def test_errors_in_order_each_saying_whether_it_resolves(version, it, match, transient) -> None:
    with pytest.raises(ImageError, match=match) as error:
        synthesize("vLLM", version, it, "server")
    assert error.value.transient is transient
    assert ("(transient)" in error.value.message) is transient


def test_a_stated_image_never_reads_the_type() -> None:
    unobserved = instance_type(manufacturer="")
    assert image_for("mine:1", "", "vLLM", "", unobserved, "r") == "mine:1"
    assert image_for("", "deploy:2", "vLLM", "", unobserved, "r") == "deploy:2"
