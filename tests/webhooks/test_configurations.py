"""The webhook configurations generated from the registry: names, paths and namespace scope."""

from __future__ import annotations

from webhooks import configurations, registry


def _entries() -> list[dict]:
    objects = configurations.render(url="https://127.0.0.1:31443", ca_bundle=b"ca")
    return [entry for obj in objects for entry in obj["webhooks"]]


def test_only_core_pod_entries_skip_the_operator_namespace_and_kube_system() -> None:
    entries = _entries()
    assert {e["name"] for e in entries} == {w.name for w in registry.WEBHOOKS}
    for entry in entries:
        rule = entry["rules"][0]
        if rule["apiGroups"] == [""] and rule["resources"] == ["pods"]:
            assert entry["namespaceSelector"] == {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["gpustack-system", "kube-system"],
                    }
                ]
            }
        else:  # our own kinds and Workloads are judged in every namespace
            assert entry["namespaceSelector"] == {}, entry["name"]


def test_urls_follow_the_registered_paths() -> None:
    for entry in _entries():
        webhook = next(w for w in registry.WEBHOOKS if w.name == entry["name"])
        assert entry["clientConfig"]["url"] == "https://127.0.0.1:31443" + webhook.path
