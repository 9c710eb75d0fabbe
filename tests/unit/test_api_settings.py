"""api.settings: every Setting, its default, its check and its seed variable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api import settings
from api.settings import (
    SETTINGS,
    SettingError,
    cross_check,
    env_name,
    seed_all,
    seed_value,
    validate,
    validate_update,
)

APPENDIX = {
    "container-registry": "",
    "container-namespace": "",
    "image-pull-secrets": "",
    "image-pull-policy": "IfNotPresent",
    "instance-general-resources-overcommit": "true",
    "instance-ssh-server-image": "gpustack/ssh-server:v1.3.0",
    "kv-cache-backend-image": "gpustack/mirrored-mooncake:0.3.13.post1-cpu",
    "model-deployment-kv-cache-dtype-owned": "true",
    "model-deployment-router-image": "gpustack/llm-router:v0.1.0",
    "model-deployment-router-proxy-image": "gpustack/mirrored-envoy:distroless-v1.33.2",
    "model-deployment-routing-sidecar-image": "gpustack/mirrored-llm-d-router-disagg-sidecar:v0.10.0",
    "model-deployment-tcp-tw-reuse": "false",
    "model-prefetch-warmup-image": "gpustack/mirrored-python:3.12-alpine",
    "model-artifact-huggingface-endpoint": "https://huggingface.co",
    "model-artifact-modelscope-endpoint": "https://www.modelscope.cn",
    "model-artifact-https-proxy": "",
    "model-artifact-no-proxy": "",
    "model-artifact-ca-bundle": "",
    "model-artifact-revalidate-interval": "24h",
    "model-artifact-delivery-mode": "Engine",
    "model-store-high-watermark": "80",
    "model-store-low-watermark": "70",
    "model-store-download-concurrency": "8",
    "model-store-peer-sync": "true",
    "model-store-download-bandwidth": "0",
    "instance-access-static-address": "",
    "instance-access-wildcard-dns": "",
    "instance-privileged-allowed": "false",
    "instance-host-path-volume-allowed": "false",
    "model-deployment-privileged-allowed": "false",
    "model-deployment-host-path-volume-allowed": "false",
    "instance-persistent-volume-placement": "true",
    "workload-fit-affinity": "true",
    "node-management-manual": "false",
    "instance-type-mixed-on-node": "true",
    "instance-type-derived-from-node": "true",
    "instance-type-drain-when-no-flavors": "true",
    "instance-type-aware-cpu-manufacturer": "false",
    "topology-profile-change-stop-policy": "HoldAndDrain",
}
# Settings this project adds to the spec's appendix, each off (blank) by default.
ADDED = {"model-deployment-engine-image": ""}


def test_the_registry_is_the_appendix_table_and_the_project_s_additions() -> None:
    assert {name: s.default for name, s in SETTINGS.items()} == APPENDIX | ADDED


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_default_passes_its_own_check(name: str) -> None:
    assert validate(name, SETTINGS[name].default) is None
    assert SETTINGS[name].env == env_name(name)


def test_env_names() -> None:
    assert env_name("instance-privileged-allowed") == "GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED"
    assert SETTINGS["model-store-download-bandwidth"].env == "GPUSTACK_MODEL_STORE_DOWNLOAD_BANDWIDTH"


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("instance-privileged-allowed", ["true", "False", "1", "t"], ["yes", "on", ""]),
        ("image-pull-policy", ["Always", "Never"], ["always", ""]),
        (
            "container-registry",
            ["", "registry.example.com:5000", "harbor.example.com/mirror"],
            ["https://x", "a b"],
        ),
        (
            "instance-ssh-server-image",
            ["ssh-server", "reg:5000/a/b:v1", "a/b@sha256:" + "0" * 64],
            ["", "A/B", "a b"],
        ),
        ("kv-cache-backend-image", ["", "gpustack/mirrored-mooncake:0.3.13"], ["not an image"]),
        (
            "model-artifact-huggingface-endpoint",
            ["https://hf-mirror.com", "http://10.0.0.1:8080/hub"],
            ["", "hf-mirror.com", "ftp://x"],
        ),
        (
            "model-artifact-https-proxy",
            ["", "http://proxy:3128", "https://proxy.example.com"],
            ["http://u:p@proxy:3128", "proxy:3128", "socks5://p:1"],
        ),
        (
            "model-artifact-no-proxy",
            ["", ".svc,.cluster.local,10.0.0.0/8", "localhost, 127.0.0.1"],
            ["a,,b", "bad host"],
        ),
        ("model-artifact-ca-bundle", ["", "hub-ca"], ["Hub_CA", "/etc/ca"]),
        ("model-artifact-revalidate-interval", ["1m", "24h", "1h30m", "90s"], ["30s", "1d", "soon", ""]),
        ("model-artifact-delivery-mode", ["Engine", "Node"], ["engine", "Pod"]),
        ("topology-profile-change-stop-policy", ["HoldAndDrain", "Hold"], ["hold", "None", "Drain", ""]),
        ("model-store-high-watermark", ["95", "2"], ["96", "1", "eighty", "80.5"]),
        ("model-store-low-watermark", ["1", "94"], ["0", "95"]),
        ("model-store-download-concurrency", ["1", "64"], ["0", "65"]),
        ("model-store-download-bandwidth", ["0", "200Mi", "1G"], ["-1", "fast", "200 Mi"]),
    ],
)
def test_validators(name: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        assert validate(name, value) is None, value
    for value in bad:
        assert validate(name, value), value


def test_the_profile_change_stop_policy_refusal_names_the_choices() -> None:
    assert validate("topology-profile-change-stop-policy", "None") == (
        'must be one of HoldAndDrain, Hold, not "None"'
    )


def test_node_delivery_needs_the_csi_driver() -> None:
    assert validate("model-artifact-delivery-mode", "Node", csi_driver_present=True) is None
    assert "CSIDriver" in (validate("model-artifact-delivery-mode", "Node", csi_driver_present=False) or "")
    assert validate("model-artifact-delivery-mode", "Node") is None


def test_watermarks_cross_check() -> None:
    assert cross_check({}) == []
    assert [n for n, _ in cross_check({"model-store-high-watermark": "70"})] == [
        "model-store-high-watermark",
        "model-store-low-watermark",
    ]
    current = {"model-store-high-watermark": "80", "model-store-low-watermark": "70"}
    assert validate_update("model-store-low-watermark", "85", current) == (
        "must be below model-store-high-watermark (80), not 85"
    )
    assert validate_update("model-store-high-watermark", "90", current) is None
    assert validate_update("model-store-high-watermark", "99", current)


def test_seeds() -> None:
    assert seed_value("model-artifact-delivery-mode", {}) == "Engine"
    assert (
        seed_value("model-artifact-delivery-mode", {"GPUSTACK_MODEL_ARTIFACT_DELIVERY_MODE": "Node"})
        == "Node"
    )
    with pytest.raises(SettingError, match="GPUSTACK_MODEL_ARTIFACT_HTTPS_PROXY"):
        seed_value(
            "model-artifact-https-proxy", {"GPUSTACK_MODEL_ARTIFACT_HTTPS_PROXY": "http://u:p@proxy:3128"}
        )
    assert seed_all({}) == APPENDIX | ADDED
    with pytest.raises(SettingError):
        seed_all({"GPUSTACK_MODEL_STORE_LOW_WATERMARK": "90"})
    with pytest.raises(SettingError, match="no such setting"):
        seed_value("no-such-setting", {})


def test_readers() -> None:
    assert SETTINGS["model-store-peer-sync"].readers == ("model-manager",)
    assert SETTINGS["model-artifact-https-proxy"].readers == ("worker", "model-manager")
    assert settings.as_bool("True") is True


@given(st.integers(min_value=-1000, max_value=1000), st.integers(min_value=-1000, max_value=1000))
def test_watermark_pairs(high: int, low: int) -> None:
    values = {"model-store-high-watermark": str(high), "model-store-low-watermark": str(low)}
    accepted = (
        validate("model-store-high-watermark", str(high)) is None
        and validate("model-store-low-watermark", str(low)) is None
        and not cross_check(values)
    )
    assert accepted == (2 <= high <= 95 and 1 <= low <= 94 and low < high)


@given(st.text(max_size=20))
def test_durations_below_a_minute_are_refused(text: str) -> None:
    problem = validate("model-artifact-revalidate-interval", text)
    try:
        seconds = settings.parse_duration(text)
    except ValueError:
        assert problem
    else:
        assert (problem is None) == (seconds >= 60)
