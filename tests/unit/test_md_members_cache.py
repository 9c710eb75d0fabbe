"""The ModelDeployment controller's Pod reads (controllers/modeldeployment/members.py): from the Pod
cache once it shows the controller's own last writes, from the API server until then."""

from __future__ import annotations

from typing import Any

import pytest

from api import constants
from controllers.modeldeployment import members as mm
from controllers.modeldeployment import plan as planner
from readmodels.modeldeployment import Deployment

NS, MD, UID = "team-a", "chat", "uid-1"


def pod(name: str, leaving: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "labels": {
            constants.LABEL_APP_NAME: constants.APP_NAME_MODEL_DEPLOYMENT,
            constants.LABEL_APP_INSTANCE: MD,
        },
        "ownerReferences": [{"uid": UID, "controller": True}],
    }
    if leaving:
        meta["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


class Cache:
    """The Pod informer as Members reads it."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.is_synced = True

    def synced(self) -> bool:
        return self.is_synced

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get(name)

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        assert index == mm.INDEX_INSTANCE and value == f"{NS}/{MD}"
        return list(self.objects.values())


class API:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.lists = 0
        self.made = 0

    def list(self, kind: str, namespace: str, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        assert f"{constants.LABEL_APP_INSTANCE}={MD}" in label_selector
        return list(self.objects.values()), "1"

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.made += 1
        created = {**obj, "metadata": {**obj["metadata"], "name": f"{MD}-server-{self.made}"}}
        self.objects[created["metadata"]["name"]] = created
        return created

    def delete(self, kind: str, name: str, namespace: str) -> None:
        self.objects[name] = pod(name, leaving=True)


@pytest.fixture
def parts() -> tuple[mm.Members, API, Cache]:
    api, cache = API(), Cache()
    return mm.Members(api, workloads=None, pods=cache), api, cache  # type: ignore[arg-type]


DEPLOYMENT = Deployment({"metadata": {"name": MD, "namespace": NS}, "spec": {"roles": []}})


def plan(creates: int = 0, deletes: list[dict[str, Any]] | None = None) -> planner.Plan:
    template = pod("")
    template["metadata"].pop("name")
    template["metadata"]["generateName"] = f"{MD}-server-"
    return planner.Plan(creates=[template] * creates, pod_deletes=deletes or [], workload_deletes=[])


def test_a_converged_deployment_is_read_from_the_cache(parts) -> None:
    members, api, cache = parts
    cache.objects["chat-server-0"] = pod("chat-server-0")
    assert [p["metadata"]["name"] for p in members.list_pods(DEPLOYMENT, UID)] == ["chat-server-0"]
    assert api.lists == 0 and members.api_lists == 0


def test_after_a_create_the_api_is_asked_until_the_cache_shows_the_pod(parts) -> None:
    members, api, cache = parts
    members.execute(DEPLOYMENT, plan(creates=1))
    assert [p["metadata"]["name"] for p in members.list_pods(DEPLOYMENT, UID)] == ["chat-server-1"]
    assert api.lists == 1  # the cache does not have it yet: it would plan a second create
    cache.objects["chat-server-1"] = api.objects["chat-server-1"]
    members.list_pods(DEPLOYMENT, UID)
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1


def test_after_a_delete_the_api_is_asked_until_the_cache_shows_the_pod_leaving(parts) -> None:
    members, api, cache = parts
    cache.objects["chat-server-0"] = api.objects["chat-server-0"] = pod("chat-server-0")
    members.execute(DEPLOYMENT, plan(deletes=[pod("chat-server-0")]))
    listed = members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1 and listed[0]["metadata"].get("deletionTimestamp")
    cache.objects["chat-server-0"] = pod("chat-server-0", leaving=True)
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1
    # Gone from the cache altogether is as good.
    members.execute(DEPLOYMENT, plan(deletes=[pod("chat-server-0", leaving=True)]))
    del cache.objects["chat-server-0"]
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1


def test_a_cache_that_never_catches_up_is_trusted_again_after_the_expectation_ends(
    parts, monkeypatch
) -> None:
    members, api, _cache = parts
    members.execute(DEPLOYMENT, plan(creates=1))
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1
    monkeypatch.setattr(mm, "EXPECTATION_SECONDS", -1.0)
    members.execute(DEPLOYMENT, plan(creates=1))  # renews the deadline, already past
    members.list_pods(DEPLOYMENT, UID)  # past its deadline: this pass asks the API once more …
    members.list_pods(DEPLOYMENT, UID)  # … and the next trusts the cache
    assert api.lists == 2


def test_an_unsynced_cache_is_never_read(parts) -> None:
    members, api, cache = parts
    cache.is_synced = False
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1


def test_pods_of_another_owner_are_not_the_deployments(parts) -> None:
    members, _api, cache = parts
    stray = pod("chat-server-9")
    stray["metadata"]["ownerReferences"] = [{"uid": "another", "controller": True}]
    cache.objects["chat-server-9"] = stray
    assert members.list_pods(DEPLOYMENT, UID) == []


def test_after_a_write_a_pass_waits_for_the_cache_instead_of_listing(parts) -> None:
    members, api, cache = parts
    key = (NS, MD)
    assert not members.waiting(key)  # nothing written: read the cache
    members.execute(DEPLOYMENT, plan(creates=1))
    assert members.waiting(key)  # the create is not in the cache yet
    cache.objects["chat-server-1"] = api.objects["chat-server-1"]
    assert not members.waiting(key)
    assert [p["metadata"]["name"] for p in members.list_pods(DEPLOYMENT, UID)] == ["chat-server-1"]
    assert api.lists == 0  # a pass that waited never listed


def test_a_pass_stops_waiting_once_the_expectation_ends_or_without_a_synced_cache(parts, monkeypatch) -> None:
    members, api, cache = parts
    monkeypatch.setattr(mm, "EXPECTATION_SECONDS", -1.0)
    members.execute(DEPLOYMENT, plan(creates=1))
    assert not members.waiting((NS, MD))  # past its deadline: the pass lists on the API server
    members.list_pods(DEPLOYMENT, UID)
    assert api.lists == 1
    monkeypatch.setattr(mm, "EXPECTATION_SECONDS", 60.0)
    members.execute(DEPLOYMENT, plan(creates=1))
    cache.is_synced = False
    assert not members.waiting((NS, MD))


def test_a_pass_that_comes_after_the_deadline_reads_a_cache_that_shows_its_writes(parts, monkeypatch) -> None:
    # At 5,000 deployments a deployment's next pass came minutes after the one that created its
    # Pods (the queue behind the Service applies): the cache showed them, and it was still listed.
    members, api, cache = parts
    monkeypatch.setattr(mm, "EXPECTATION_SECONDS", -1.0)
    members.execute(DEPLOYMENT, plan(creates=1))
    cache.objects["chat-server-1"] = api.objects["chat-server-1"]
    assert [p["metadata"]["name"] for p in members.list_pods(DEPLOYMENT, UID)] == ["chat-server-1"]
    assert api.lists == 0
