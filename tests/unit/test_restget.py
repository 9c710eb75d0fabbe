"""The in-process ``kubectl get -o json`` of the e2e harness (tests/cluster/restget.py): which command
lines it takes (the rest fork kubectl) and what it prints for a list."""

from __future__ import annotations

import json

import pytest

from tests.cluster import restget


@pytest.mark.parametrize(
    ("args", "query"),
    [
        (("get", "pods", "-o", "json"), restget.Query("pods")),
        (("get", "pod", "p", "-n", "ns", "-o", "json"), restget.Query("pod", "p", namespace="ns")),
        (
            ("get", "pods", "-A", "-l", "a=b", "-ojson"),
            restget.Query("pods", all_namespaces=True, selector="a=b"),
        ),
        (
            ("get", "pods", "--namespace=ns", "--field-selector", "spec.nodeName=n", "-o=json"),
            restget.Query("pods", namespace="ns", field_selector="spec.nodeName=n"),
        ),
        (
            ("get", "nms", "n", "--ignore-not-found", "-o", "json"),
            restget.Query("nms", "n", ignore_not_found=True),
        ),
    ],
)
def test_the_get_command_lines_it_answers(args: tuple[str, ...], query: restget.Query) -> None:
    assert restget.parse(args) == query


@pytest.mark.parametrize(
    "args",
    [
        ("get", "pods"),  # a table, not JSON
        ("get", "pods", "-o", "jsonpath={.items}"),
        ("get", "pods,services", "-o", "json"),
        ("get", "pod/p", "-o", "json"),
        ("get", "pods", "a", "b", "-o", "json"),
        ("get", "pods", "--sort-by", ".metadata.name", "-o", "json"),
        ("get", "pods", "-n"),
        ("delete", "pod", "p", "-o", "json"),
        (),
    ],
)
def test_everything_else_forks_kubectl(args: tuple[str, ...]) -> None:
    assert restget.parse(args) is None


def test_a_list_prints_as_kubectl_prints_it() -> None:
    resource = restget.Resource("kueue.x-k8s.io/v1beta2", "workloads", True, "Workload")
    answer = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadList",
        "items": [{"metadata": {"name": "w"}}],
    }
    assert restget._as_list(answer, resource) == {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}}],
    }


def test_paths_follow_scope() -> None:
    pods = restget.Resource("v1", "pods", True, "Pod")
    nodes = restget.Resource("v1", "nodes", False, "Node")
    flavors = restget.Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", False, "ResourceFlavor")
    assert pods.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert pods.path(None, None) == "/api/v1/pods"
    assert nodes.path("ignored", "n") == "/api/v1/nodes/n"
    assert flavors.path(None, None) == "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"


@pytest.mark.parametrize(
    ("args", "deletion"),
    [
        (("delete", "pod", "p"), restget.Deletion("pod", ("p",))),
        (
            ("delete", "pods", "a", "b", "-n", "ns", "--ignore-not-found", "--wait=false"),
            restget.Deletion("pods", ("a", "b"), namespace="ns", ignore_not_found=True, wait=False),
        ),
        (
            ("delete", "instancetype", "t", "--wait=true", "--timeout=1m30s"),
            restget.Deletion("instancetype", ("t",), timeout=90.0),
        ),
        (
            ("delete", "ns", "x", "--namespace=y", "--timeout=0"),
            restget.Deletion("ns", ("x",), namespace="y"),
        ),
    ],
)
def test_the_delete_command_lines_it_answers(args: tuple[str, ...], deletion: restget.Deletion) -> None:
    assert restget.parse_delete(args) == deletion


@pytest.mark.parametrize(
    "args",
    [
        ("delete", "pods", "--all", "-n", "ns"),
        ("delete", "pods", "-l", "a=b"),
        ("delete", "-f", "manifest.yaml"),
        ("delete", "pod/p"),
        ("delete", "pods,services", "p"),
        ("delete", "pod", "p", "--grace-period=0", "--force"),
        ("delete", "pod", "p", "--as=alice"),
        ("delete", "pod", "p", "--timeout=soon"),
        ("delete", "pod", "p", "--wait=maybe"),
        ("delete", "pod"),
        ("delete", "--raw", "/api/v1/namespaces/ns/events"),
    ],
)
def test_every_other_delete_forks_kubectl(args: tuple[str, ...]) -> None:
    assert restget.parse_delete(args) is None
    assert restget.parse(args) is None


@pytest.mark.parametrize(
    ("args", "write"),
    [
        (("create", "-f", "-"), restget.Write("create")),
        (("create", "--dry-run=server", "-f", "-", "-n", "ns"), restget.Write("create", "ns", True)),
        (("apply", "-f", "-"), restget.Write("apply")),
        (("apply", "--namespace=ns", "--filename=-"), restget.Write("apply", "ns")),
    ],
)
def test_the_write_command_lines_it_answers(args: tuple[str, ...], write: restget.Write) -> None:
    assert restget.parse_write(args) == write


@pytest.mark.parametrize(
    "args",
    [
        ("apply", "-f", "manifest.yaml"),
        ("apply", "-f", "-", "--server-side"),
        ("apply", "--dry-run=server", "-f", "-"),
        ("create", "-f", "-", "-o", "json"),
        ("create", "-f", "-", "-f", "-"),
        ("create", "--dry-run=client", "-f", "-"),
        ("create", "namespace", "x"),
        ("create", "token", "sa", "-n", "ns"),
        ("apply", "-f"),
        ("replace", "-f", "-"),
    ],
)
def test_every_other_write_forks_kubectl(args: tuple[str, ...]) -> None:
    assert restget.parse_write(args) is None


def test_the_last_applied_annotation_is_written_as_kubectls_go_encoder_writes_it() -> None:
    # Recorded from kubectl 1.36's apply of this ConfigMap (namespace filled in from the context).
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c3", "namespace": "default"},
        "data": {"a": "1"},
    }
    assert restget.last_applied(obj) == (
        '{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap",'
        '"metadata":{"annotations":{},"name":"c3","namespace":"default"}}\n'
    )
    marked = {**obj, "metadata": {"name": "c", "annotations": {"x": "<&>é", restget._LAST_APPLIED: "old"}}}
    assert '"annotations":{"x":"\\u003c\\u0026\\u003eé"}' in restget.last_applied(marked)


class _NoServer(restget.Reader):
    """A reader that must not be asked anything: the write is refused before any request."""

    def __init__(self) -> None:
        self._namespace = "default"
        self._kinds = {}

    def _request(self, *args: object, **kwargs: object) -> tuple[int, bytes]:
        raise AssertionError("no request expected")

    def _discover(self, timeout: float) -> None:
        self._kinds = {("v1", "ConfigMap"): restget.Resource("v1", "configmaps", True, "ConfigMap")}


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",  # YAML
        json.dumps({"apiVersion": "v1", "kind": "List", "items": []}),
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "c-"}}),
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "b"}}),
        json.dumps({"apiVersion": "v9", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        json.dumps(["not", "an", "object"]),
    ],
)
def test_what_it_cannot_write_as_kubectl_would_forks_without_a_request(text: str) -> None:
    assert _NoServer().write(("create", "-f", "-", "-n", "a"), text) is None
