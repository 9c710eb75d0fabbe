"""``gpustack-operator admit`` on ModelDeployments, run as the subprocess a person or CI runs: a CREATE
and an UPDATE (``--old``), each allowed and refused; one JSON line per document; exit 0 or 1."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from tests.webhooks import objects

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "examples/50-modeldeployment-qwen-chat.yaml"


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("cluster")
    types = [
        objects.instance_type("gpustack--nvidia-a10g-linux-amd64", logical=32),
        objects.instance_type("gpustack-nvidia-h20-linux-amd64", group="nvidia-h20"),
    ]
    (directory / "instancetypes.yaml").write_text(yaml.safe_dump_all(types))
    for name in (
        "30-kvcachebackend-mooncake-dram",
        "31-kvcachepool-shared-dram",
        "32-kvcachepoolbinding-qwen-cache",
    ):
        (directory / f"{name}.yaml").write_text((ROOT / "examples" / f"{name}.yaml").read_text())
    return directory


def admit(cluster_dir: Path, path: Path, *extra: str) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "admit",
            "--objects",
            str(cluster_dir),
            "-f",
            str(path),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, [orjson.loads(line) for line in done.stdout.splitlines() if line.strip()]


def readme() -> dict:
    return yaml.safe_load(README.read_text())


def test_create_allowed_prints_the_patch_and_exits_0(cluster_dir):
    code, lines = admit(cluster_dir, README)
    assert code == 0 and len(lines) == 1
    (line,) = lines
    assert line["kind"] == "ModelDeployment" and line["namespace"] == "team-a" and line["name"] == "qwen-chat"
    assert line["operation"] == "CREATE" and line["allowed"] is True and line["code"] == 200
    assert {"op": "add", "path": "/spec/kvCache/connector", "value": "Mooncake"} in line["patch"]
    assert line["object"]["spec"]["roles"][0]["kind"] == "Server"


def test_create_refused_names_the_field_and_exits_1(cluster_dir, tmp_path):
    refused = readme()
    refused["metadata"]["name"] = "qwen-chat-2"
    refused["spec"]["roles"][0]["env"] = [{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}]
    defaulted = readme()
    defaulted["metadata"]["name"] = "qwen-chat-3"
    defaulted["spec"]["roles"][0].pop("resources")
    path = tmp_path / "md.yaml"
    path.write_text(yaml.safe_dump_all([defaulted, refused]))
    code, lines = admit(cluster_dir, path)
    assert code == 1 and len(lines) == 2
    assert lines[0]["allowed"] is True
    assert {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": "1"}} in lines[0][
        "patch"
    ]
    assert lines[1]["allowed"] is False and lines[1]["code"] == 422 and lines[1]["patch"] == []
    assert 'ModelDeployment "qwen-chat-2" is invalid' in lines[1]["message"]
    assert "spec.roles[0].env[0]" in lines[1]["message"] and "GPUSTACK_MEMBER_INDEX" in lines[1]["message"]


def test_update_with_old(cluster_dir, tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(README.read_text())
    scaled = readme()
    scaled["spec"]["roles"][0]["replicas"] = 3
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(scaled))
    code, lines = admit(cluster_dir, new, "--operation", "UPDATE", "--old", str(old))
    assert code == 0 and lines[0]["allowed"] is True and lines[0]["operation"] == "UPDATE"
    moved = copy.deepcopy(scaled)
    moved["spec"]["roles"][0]["instanceType"] = "gpustack-nvidia-h20-linux-amd64"
    new.write_text(yaml.safe_dump(moved))
    code, lines = admit(cluster_dir, new, "--operation", "UPDATE", "--old", str(old))
    assert code == 1 and lines[0]["allowed"] is False and lines[0]["code"] == 422
    assert "spec.roles[0].instanceType" in lines[0]["message"]
    assert "different deployment" in lines[0]["message"]
