"""``admit`` in a CI pipeline (issue 33, item 6): several ``-f`` files and directories, a summary
line, ``-o text|json``, kinds no webhook covers reported as ``skipped``, and ``--kubeconfig``
reading the lookups from a cluster (here the in-memory apiserver of ``tests/kube_fake.py``) with
the ``--objects`` files laid over it.  Run in-process through ``cli.main``."""

from __future__ import annotations

import copy
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator import admit_cluster, cli
from kube.client import Client
from tests.cases import pods
from tests.kube_fake import FakeApiServer

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "b"}}
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "team-a"},
    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
}


def case(case_id: str) -> dict[str, Any]:
    return pods.case_pod(next(c for c in pods.CASES if c.id == case_id))


def instance_type(name: str, **changes: Any) -> dict[str, Any]:
    found = copy.deepcopy(next(t for t in pods.INSTANCE_TYPES if t["metadata"]["name"] == name))
    found["status"]["detail"].update(changes)
    return found


def admit(capsys, *argv: str, stdin: bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = cli.main(["admit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def objects(tmp_path: Path) -> Path:
    directory = tmp_path / "objects"
    directory.mkdir()
    (directory / "types.yaml").write_text(yaml.safe_dump_all(pods.INSTANCE_TYPES))
    return directory


@pytest.fixture
def manifests(tmp_path: Path) -> tuple[Path, Path]:
    """A file, and a directory tree: a nested .yml of two documents, a .json, a file to ignore."""
    single = tmp_path / "a.yaml"
    single.write_text(yaml.safe_dump(case("nvidia-whole")))
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "b.yml").write_text(yaml.safe_dump_all([case("ascend-slice-three"), CONFIG_MAP]))
    (tree / "c.json").write_text(json.dumps(case("nvidia-slice-40-percent")))
    (tree / "notes.txt").write_text("not a manifest")
    return single, tree


def one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("gpustack-operator admit: "), err
    for needle in needles:
        assert needle in err, err


def test_every_f_is_read_files_and_directories_in_order(capsys, objects, manifests):
    single, tree = manifests
    code, out, err = admit(capsys, "--objects", str(objects), "-f", str(single), "-f", str(tree))
    records = [json.loads(line) for line in out.splitlines()]
    # Files in the order given; a directory's files sorted by path, recursively, *.txt left out.
    assert [(r["file"], r["index"], r["kind"], r["decision"]) for r in records] == [
        (str(single), 0, "Pod", "allowed"),
        (str(tree / "c.json"), 0, "Pod", "allowed"),
        (str(tree / "sub" / "b.yml"), 0, "Pod", "denied"),
        (str(tree / "sub" / "b.yml"), 1, "ConfigMap", "skipped"),
    ]
    assert code == 1  # one denial fails the run; the skipped ConfigMap does not
    assert err == "2 allowed, 1 denied, 1 skipped\n"  # the default output keeps stdout all records


def test_stdin_is_one_more_source(capsys, monkeypatch, objects, manifests):
    single, _ = manifests
    code, out, _ = admit(
        capsys,
        "--objects",
        str(objects),
        "-f",
        "-",
        "-f",
        str(single),
        stdin=yaml.safe_dump_all([CONFIG_MAP, DEPLOYMENT]).encode(),
        monkeypatch=monkeypatch,
    )
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["file"], r["index"], r["decision"]) for r in records] == [
        ("<stdin>", 0, "skipped"),
        ("<stdin>", 1, "skipped"),
        (str(single), 0, "allowed"),
    ]
    assert code == 0


def test_text_output_one_line_per_object_then_the_summary(capsys, objects, manifests):
    _, tree = manifests
    code, out, err = admit(capsys, "--objects", str(objects), "-f", str(tree), "-o", "text")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[-1] == "1 allowed, 1 denied, 1 skipped"
    assert lines[0] == (
        f"allowed  {tree / 'c.json'} document 0: Pod gate1/nvidia-slice-40-percent, "
        "mutated by 1 patch operation"
    )
    assert lines[1] == '  patch: add /spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units "640k"'
    denied = next(i for i, line in enumerate(lines) if line.startswith("denied "))
    assert lines[denied].endswith("Pod gate1/ascend-slice-three (422)")
    assert lines[denied + 1].startswith("  message: ")
    assert "spec.containers[0].resources.limits[huawei.com/npu.sliced]" in lines[denied + 1]
    assert f"skipped  {tree / 'sub' / 'b.yml'} document 1: ConfigMap default/settings" in lines


def test_json_output_is_one_document_with_results_and_summary(capsys, objects, manifests):
    single, tree = manifests
    code, out, err = admit(
        capsys, "--objects", str(objects), "-f", str(single), "-f", str(tree), "-o", "json"
    )
    assert code == 1 and err == ""
    document = json.loads(out)  # the whole standard output parses as one JSON value
    assert document["summary"] == {"allowed": 2, "denied": 1, "skipped": 1}
    results = document["results"]
    assert [r["decision"] for r in results] == ["allowed", "allowed", "denied", "skipped"]
    sliced = results[1]
    assert sliced["file"] == str(tree / "c.json") and sliced["namespace"] == pods.NAMESPACE
    assert sliced["allowed"] is True and sliced["code"] == 200
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
        "value": "640k",
    } in sliced["patch"]
    denied = results[2]
    assert denied["allowed"] is False and denied["code"] == 422 and denied["object"] is None
    skipped = results[3]
    assert skipped["allowed"] is True and skipped["patch"] == [] and "ConfigMap" in skipped["message"]


def test_kinds_no_webhook_covers_are_skipped_even_on_update(capsys, tmp_path, objects):
    stored = {k: v for k, v in pods.INSTANCE_TYPES[0].items() if k != "status"}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(stored))
    edited = copy.deepcopy(stored)
    edited["spec"]["unitResources"]["cpu"] = "16"
    (tmp_path / "in.yaml").write_text(yaml.safe_dump_all([CONFIG_MAP, edited, DEPLOYMENT]))
    code, out, _ = admit(
        capsys,
        "--objects",
        str(objects),
        "--operation",
        "UPDATE",
        "--old",
        str(tmp_path / "old.yaml"),
        "-f",
        str(tmp_path / "in.yaml"),
        "-o",
        "json",
    )
    results = json.loads(out)["results"]
    # The ConfigMap and the Deployment have no stored twin in --old: no webhook judges them anyway.
    assert [r["decision"] for r in results] == ["skipped", "denied", "skipped"]
    assert results[2]["message"] == "no webhook of the operator admits apps/v1 Deployment on UPDATE"
    assert "spec.unitResources" in results[1]["message"] and code == 1


def test_a_pod_outside_every_queue_is_allowed_not_skipped(capsys, tmp_path):
    """The Pod kind is covered; its objectSelector lets this one pass untouched (allowed)."""
    pod = case("nvidia-whole")
    pod["metadata"]["labels"] = {}
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    code, out, _ = admit(capsys, "-f", str(tmp_path / "pod.yaml"), "-o", "json")
    assert code == 0 and json.loads(out)["results"][0]["decision"] == "allowed"


def test_unusable_flags_and_inputs_exit_2_with_one_line(capsys, monkeypatch, tmp_path, manifests):
    single, tree = manifests
    one_line_error(*admit(capsys, "-f", str(single), "-o", "yaml"), "-o yaml", "jsonl, json, text")
    (tmp_path / "empty").mkdir()
    one_line_error(*admit(capsys, "-f", str(tmp_path / "empty")), f"-f {tmp_path / 'empty'}", "no *.yaml")
    one_line_error(
        *admit(capsys, "-f", "-", "--objects", "-", stdin=b"", monkeypatch=monkeypatch),
        "standard input (-) can be read once",
    )
    (tree / "sub" / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p\n")
    one_line_error(*admit(capsys, "-f", str(single), "-f", str(tree)), "broken.yaml", "YAML does not parse")
    one_line_error(*admit(capsys, "--objects", str(tree), "-f", str(single)), "--objects: ", "broken.yaml")


# --kubeconfig ------------------------------------------------------------------------------------


@pytest.fixture
def cluster(monkeypatch) -> FakeApiServer:
    server = FakeApiServer()
    monkeypatch.setattr(admit_cluster, "connect", lambda path: Client(server))  # type: ignore[arg-type]
    return server


def test_kubeconfig_reads_the_lookups_from_the_cluster_each_kind_once(capsys, tmp_path, cluster):
    for item in pods.INSTANCE_TYPES:
        cluster.put(copy.deepcopy(item))
    mib, mig = case("ascend-slice-mib"), case("nvidia-mig-3g")
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([mib, mig, CONFIG_MAP]))
    code, out, _ = admit(
        capsys, "--kubeconfig", "kubeconfig", "-f", str(tmp_path / "pods.yaml"), "-o", "json"
    )
    document = json.loads(out)
    assert code == 0 and document["summary"] == {"allowed": 2, "denied": 0, "skipped": 1}
    units = [
        op["value"] for r in document["results"][:2] for op in r["patch"] if op["path"].endswith(".units")
    ]
    assert units == ["400k", "785k"]
    # Only the kinds the decisions asked for were read, each once, and nothing was written.
    assert cluster.requests == [
        ("GET", "/version"),
        ("GET", "/apis/worker.gpustack.ai/v1/instancetypes"),
    ]


def test_without_the_cluster_the_same_pods_are_refused(capsys, tmp_path, cluster):
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(case("ascend-slice-mib")))
    code, out, _ = admit(capsys, "--kubeconfig", "kubeconfig", "-f", str(tmp_path / "pod.yaml"))
    assert code == 1 and "queue-name" in json.loads(out)["message"]


def test_objects_files_replace_and_add_to_the_clusters(capsys, tmp_path, cluster):
    cluster.put(instance_type("e2e-ascend-910b"))  # 64Gi cards: the MiB request is 400k units
    files = tmp_path / "objects.yaml"
    files.write_text(
        yaml.safe_dump_all(
            [instance_type("e2e-ascend-910b", memory="128Gi"), instance_type("e2e-nvidia-h100")]
        )
    )
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([case("ascend-slice-mib"), case("nvidia-mig-3g")]))
    code, out, _ = admit(
        capsys,
        "--kubeconfig",
        "kubeconfig",
        "--objects",
        str(files),
        "-f",
        str(tmp_path / "pods.yaml"),
        "-o",
        "json",
    )
    results = json.loads(out)["results"]
    assert code == 0 and [r["decision"] for r in results] == ["allowed", "allowed"]
    units = [op["value"] for r in results for op in r["patch"] if op["path"].endswith(".units")]
    assert units == ["200k", "785k"]  # the file's 128Gi card replaced the cluster's; the H100 was added


def test_a_cluster_read_that_fails_exits_2_and_prints_no_decision(capsys, tmp_path, cluster):
    cluster.fail("GET", "/apis/worker.gpustack.ai/v1/instancetypes", 403)
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([CONFIG_MAP, case("ascend-slice-mib")]))
    one_line_error(
        *admit(capsys, "--kubeconfig", "kubeconfig", "-f", str(tmp_path / "pods.yaml")),
        "--kubeconfig: reading the InstanceType objects from the cluster of kubeconfig failed: 403",
    )


def test_a_cluster_that_does_not_answer_exits_2_before_any_decision(capsys, tmp_path, cluster):
    cluster.fail("GET", "/version", 503)
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(CONFIG_MAP))
    one_line_error(
        *admit(capsys, "--kubeconfig", "kubeconfig", "-f", str(tmp_path / "cm.yaml")),
        "--kubeconfig: the cluster of kubeconfig does not answer: 503",
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot use it"),
        ("apiVersion: v1\nkind: Config\nclusters: [\n", "cannot use it"),
        ("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n", "cannot use it"),
    ],
)
def test_an_unusable_kubeconfig_exits_2_with_one_line(capsys, tmp_path, content, needle):
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(CONFIG_MAP))
    one_line_error(
        *admit(capsys, "--kubeconfig", str(kubeconfig), "-f", str(tmp_path / "cm.yaml")),
        f"--kubeconfig {kubeconfig}: {needle}",
    )


def test_an_unreachable_apiserver_exits_2_with_one_line(capsys, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(CONFIG_MAP))
    one_line_error(
        *admit(capsys, "--kubeconfig", str(kubeconfig), "-f", str(tmp_path / "cm.yaml")),
        "does not answer",
    )
