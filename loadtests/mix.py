"""The realistic request mix the load tests and the benchmark send, and the cluster objects the
webhooks read while answering it (served to the worker with ``--objects``).

Pods: whole, shared, sliced and partitioned accelerators across manufacturers, with sidecars and
RDMA, and a share of refusals; ModelDeployments: vLLM and SGLang roles with long command lines
(owned keys, degrees, ports), creates and updates.
"""

from __future__ import annotations

import copy
import random
import uuid
from pathlib import Path
from typing import Any

import orjson
import yaml

from api.naming import local_queue_name
from tests.webhooks import objects  # the one InstanceType builder (run from the repository)

NAMESPACE = "bench"


def instance_type(
    name: str,
    group: str,
    manufacturer: str,
    memory: str,
    *,
    logical: int = 0,
    profiles: tuple[tuple[str, int], ...] = (),
) -> dict[str, Any]:
    return objects.instance_type(
        name,
        group=group,
        manufacturer=manufacturer,
        memory=memory,
        logical=logical,
        profiles=objects.profile_list(profiles),
        capacity="64",
    )


TYPES = [
    instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g", "nvidia", "24Gi", logical=512),
    instance_type(
        "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
        "nvidia-h100-80gb-hbm3",
        "nvidia",
        "81920Mi",
        profiles=(("1g.10gb", 9856), ("3g.40gb", 40192), ("7g.80gb", 80896)),
    ),
    instance_type("gpustack--ascend-910b-linux-amd64", "ascend-910b", "ascend", "64Gi", logical=252),
    instance_type(
        "gpustack--hygon-k100-linux-amd64", "hygon-k100", "hygon", "64Gi", profiles=(("2g.15gb", 15360),)
    ),
    instance_type("gpustack--amd-mi300x-linux-amd64", "amd-mi300x", "amd", "192Gi", logical=64),
]
QUEUE = {t["spec"]["acceleratorGroup"]: local_queue_name(t["metadata"]["name"]) for t in TYPES}


def write_objects(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    objects = [*TYPES, *_kv_objects()]
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return directory


def _kv_objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "KVCacheBackend",
            "metadata": {"name": "mooncake-dram"},
            "spec": {
                "type": "Mooncake",
                "transport": {"protocol": "TCP"},
                "connection": {
                    "managed": {
                        "leader": {},
                        "members": [
                            {
                                "nodeSelector": {"kubernetes.io/os": "linux"},
                                "medium": "DRAM",
                                "capacityPerMember": "8Gi",
                            }
                        ],
                    }
                },
            },
        },
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "KVCachePool",
            "metadata": {"name": "shared-dram"},
            "spec": {"backends": ["mooncake-dram"], "quota": {"total": "8Gi"}},
        },
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "KVCachePoolBinding",
            "metadata": {"name": "qwen-cache", "namespace": NAMESPACE},
            "spec": {
                "poolRef": {"name": "shared-dram"},
                "quota": {"ceiling": "4Gi"},
                "domain": {"name": "default", "blockSize": 64, "dtype": "bfloat16"},
            },
        },
    ]


def _container(name: str, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "ghcr.io/example/app:1.0",
        "command": ["sleep", "infinity"],
        "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi", **limits}},
        **extra,
    }


def _pod(name: str, group: str, *containers: dict[str, Any], init: list | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE[group], "app.kubernetes.io/name": "bench"},
            "annotations": {"example.com/owner": "team-a"},
        },
        "spec": spec,
    }


def pods() -> list[tuple[str, dict[str, Any]]]:
    """(label, Pod) pairs; about one in six is refused."""
    sidecar = _container("metrics", {"cpu": "100m"})
    return [
        ("exclusive", _pod("train", "nvidia-a10g", _container("main", {"nvidia.com/gpu": "2"}), sidecar)),
        ("shared", _pod("notebook", "nvidia-a10g", _container("main", {"nvidia.com/gpu.shared": "2"}))),
        (
            "sliced-percent",
            _pod(
                "infer",
                "nvidia-a10g",
                _container(
                    "main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}
                ),
                _container("sshd", {"device.gpustack.ai/nvidia.visibility": "1"}),
            ),
        ),
        (
            "sliced-mib",
            _pod(
                "ascend",
                "ascend-910b",
                _container(
                    "main", {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-mib": "16384"}
                ),
                init=[
                    _container("warmup", {"cpu": "1"}),
                    _container("proxy", {"cpu": "100m"}, restartPolicy="Always"),
                ],
            ),
        ),
        (
            "partitioned",
            _pod(
                "mig",
                "nvidia-h100-80gb-hbm3",
                _container(
                    "main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
                ),
            ),
        ),
        (
            "partitioned-hygon",
            _pod(
                "dcu",
                "hygon-k100",
                _container(
                    "main", {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}
                ),
            ),
        ),
        (
            "amd-rdma",
            _pod(
                "rdma",
                "amd-mi300x",
                _container("main", {"amd.com/gpu": "1", "device.gpustack.ai/rdma.shared": "1"}),
            ),
        ),
        (
            "refused-mixed",
            _pod(
                "mixed",
                "nvidia-a10g",
                _container("a", {"nvidia.com/gpu": "1"}),
                _container("b", {"nvidia.com/gpu.shared": "1"}),
            ),
        ),
        (
            "refused-slice",
            _pod(
                "three",
                "ascend-910b",
                _container(
                    "main", {"huawei.com/npu.sliced": "3", "huawei.com/npu.sliced.memory-percentage": "25"}
                ),
            ),
        ),
    ]


def _vllm_args(rng: random.Random, size: int) -> list[str]:
    args = [
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--max-model-len",
        "32768",
        "--gpu-memory-utilization",
        "0.92",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--max-num-batched-tokens",
        "8192",
        "--max-num-seqs",
        "256",
        "--disable-log-requests",
        "--trust-remote-code",
        "--dtype",
        "bfloat16",
        "--swap-space",
        "4",
        "--block-size",
        "16",
    ]
    while len(args) < size:
        args += [
            f'--override-generation-config={{"temperature": {rng.random():.2f}}}',
            "--seed",
            str(rng.randint(0, 9999)),
            "--tokenizer-mode",
            "auto",
            "--served-model-name",
            "Qwen/Qwen2.5-7B-Instruct",
        ]
    return args[:size]


def model_deployments() -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(label, object, old object or None)."""
    rng = random.Random(11)
    base = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "qwen-chat", "namespace": NAMESPACE},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
            "engine": {"name": "vLLM", "version": "0.29.0"},
            "roles": [
                {
                    "name": "server",
                    "kind": "Server",
                    "replicas": 2,
                    "size": 1,
                    "instanceType": "gpustack--nvidia-a10g-linux-amd64",
                    "resources": {"accelerator": "2"},
                    "extraArgs": _vllm_args(rng, 120),
                    "env": [
                        {"name": "HF_HUB_OFFLINE", "value": "1"},
                        {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
                    ],
                }
            ],
        },
    }
    cached = copy.deepcopy(base)
    cached["metadata"]["name"] = "qwen-cached"
    cached["spec"]["kvCache"] = {"poolRef": {"name": "qwen-cache"}}
    sglang = copy.deepcopy(base)
    sglang["metadata"]["name"] = "qwen-sglang"
    sglang["spec"]["engine"] = {"name": "SGLang", "version": "0.5.18"}
    sglang["spec"]["roles"][0]["extraArgs"] = [
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.85",
        "--context-length",
        "32768",
    ] * 20
    refused = copy.deepcopy(base)
    refused["metadata"]["name"] = "qwen-owned"
    refused["spec"]["roles"][0]["extraArgs"] = [
        *base["spec"]["roles"][0]["extraArgs"],
        "--kv_transfer_config={}",
    ]
    scaled = copy.deepcopy(base)
    scaled["spec"]["roles"][0]["replicas"] = 4
    return [
        ("vllm-create", base, None),
        ("vllm-kvcache", cached, None),
        ("sglang-create", sglang, None),
        ("refused-owned-arg", refused, None),
        ("vllm-scale", scaled, base),
    ]


def review(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
            "operation": "UPDATE" if old else "CREATE",
            "namespace": obj["metadata"].get("namespace", ""),
            "name": obj["metadata"]["name"],
            "object": obj,
            "oldObject": old,
            "userInfo": {
                "username": "system:serviceaccount:team-a:deployer",
                "groups": ["system:authenticated"],
            },
            "dryRun": False,
        },
    }


def bodies(kind: str) -> list[bytes]:
    """Encoded AdmissionReviews of the mix for one endpoint kind: pod or md."""
    if kind == "pod":
        return [orjson.dumps(review(p)) for _, p in pods()]
    return [orjson.dumps(review(obj, old)) for _, obj, old in model_deployments()]
