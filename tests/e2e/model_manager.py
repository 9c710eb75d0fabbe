"""The model-manager plugin's identity on the cluster, as the chart gives the DaemonSet: its
ServiceAccount, RBAC and the CSIDriver, and a kubeconfig whose token is bound to a Pod of its own on
the node (so the status guard admits it for that node only).  Not a test module."""

from __future__ import annotations

from pathlib import Path

import gpustack
import harness
import yaml

SA = "gpustack-model-manager"
SYSTEM = gpustack.SYSTEM_NAMESPACE


def plugin_rbac(cluster: harness.ClusterInfo) -> None:
    """The plugin's ServiceAccount and RBAC (what the chart grants the DaemonSet), and the CSIDriver."""
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": SYSTEM}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": SA},
                "rules": [
                    {
                        "apiGroups": ["worker.gpustack.ai"],
                        "resources": ["modelartifacts", "nodemodelstores"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": ["worker.gpustack.ai"],
                        "resources": ["nodemodelstores/status"],
                        "verbs": ["get", "update", "patch"],
                    },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": SA},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SA},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": SYSTEM}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": SA, "namespace": SYSTEM},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": SA, "namespace": SYSTEM},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": SYSTEM}],
            },
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": "model.csi.gpustack.ai"},
                "spec": {
                    "attachRequired": False,
                    "podInfoOnMount": True,
                    "volumeLifecycleModes": ["Ephemeral"],
                    "fsGroupPolicy": "None",
                },
            },
        ]
    )


def bound_kubeconfig(cluster: harness.ClusterInfo, node: str, path: Path) -> None:
    """A kubeconfig whose token is bound to the plugin's own Pod on ``node`` (as the DaemonSet's is)."""
    pod = f"mm-{node}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": SYSTEM},
            "spec": {
                "nodeName": node,
                "serviceAccountName": SA,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "model-manager", "image": "gpustack/gpustack-operator:e2e"}],
            },
        }
    )
    uid = cluster.kubectl_json("get", "pod", pod, "-n", SYSTEM)["metadata"]["uid"]
    token = cluster.kubectl(
        "create",
        "token",
        SA,
        "-n",
        SYSTEM,
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        pod,
        "--bound-object-uid",
        uid,
        "--duration",
        "2h",
    ).stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "plugin", "user": {"token": token}}],
        "contexts": [
            {"name": "plugin", "context": {"cluster": admin["clusters"][0]["name"], "user": "plugin"}}
        ],
        "current-context": "plugin",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
