"""The fleet view of InstanceTypeFlavors (gateway.flavors): de-duplication by spec and its deltas."""

from __future__ import annotations

from gateway.flavors import Catalog
from gateway.fleet import ADDED, DELETED, MODIFIED
from tests.unit.gateway_objects import flavor

H100 = "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d"
CPU_SPEC = {
    "acceleratorGroup": "",
    "acceleratable": False,
    "manufacturer": "",
    "product": "",
    "sliceable": False,
}


def test_identical_flavors_collapse_and_list_their_clusters_sorted():
    catalog = Catalog().load([("c", flavor(H100)), ("a", flavor(H100)), ("b", flavor("other-name"))])
    (item,) = catalog.to_json()["items"]
    assert item["name"] == H100  # the first seen
    assert item["spec"]["clusters"] == ["a", "b", "c"]
    assert item["spec"]["product"] == "NVIDIA H100 80GB HBM3"


def test_a_different_spec_field_is_another_flavor_and_accelerated_come_first():
    catalog = Catalog().load(
        [
            ("a", flavor("z-cpu", **CPU_SPEC)),
            ("a", flavor("b-h100", memory="94Gi")),
            ("a", flavor("a-h100")),
        ]
    )
    assert [i["name"] for i in catalog.to_json()["items"]] == ["a-h100", "b-h100", "z-cpu"]


def test_deltas_added_modified_and_deleted_with_an_empty_cluster_list():
    catalog = Catalog()
    ((kind, item),) = catalog.apply(ADDED, "a", flavor(H100))
    assert (kind, item["spec"]["clusters"]) == (ADDED, ["a"])
    ((kind, item),) = catalog.apply(ADDED, "b", flavor(H100))
    assert (kind, item["spec"]["clusters"]) == (MODIFIED, ["a", "b"])
    assert catalog.apply(MODIFIED, "b", flavor(H100)) == []  # nothing a watcher sees changed
    ((kind, item),) = catalog.apply(DELETED, "a", flavor(H100))
    assert (kind, item["spec"]["clusters"]) == (MODIFIED, ["b"])
    ((kind, item),) = catalog.apply(DELETED, "b", flavor(H100))
    assert kind == DELETED
    assert item["name"] == H100
    assert item["spec"]["clusters"] == []
    assert item["spec"]["product"] == "NVIDIA H100 80GB HBM3"
    assert catalog.to_json() == {"items": []}


def test_a_cluster_stays_while_any_of_its_flavors_has_the_spec():
    catalog = Catalog().load([("a", flavor("one")), ("a", flavor("two")), ("b", flavor("one"))])
    assert catalog.apply(DELETED, "a", flavor("one")) == []
    ((kind, item),) = catalog.apply(DELETED, "a", flavor("two"))
    assert (kind, item["spec"]["clusters"]) == (MODIFIED, ["b"])


def test_a_spec_change_in_place_leaves_the_old_group():
    catalog = Catalog().load([("a", flavor("f")), ("b", flavor("f"))])
    changes = catalog.apply(MODIFIED, "a", flavor("f", memory="94Gi"))
    assert [(kind, item["spec"]["clusters"]) for kind, item in changes] == [(MODIFIED, ["b"]), (ADDED, ["a"])]


def test_dropping_a_cluster_and_deleting_objects():
    catalog = Catalog().load([("a", flavor(H100)), ("a", flavor("solo", memory="94Gi")), ("b", flavor(H100))])
    going = flavor(H100)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    changes = catalog.apply(DELETED, "a", None)
    assert sorted((kind, item["name"], item["spec"]["clusters"]) for kind, item in changes) == [
        (DELETED, "solo", []),
        (MODIFIED, H100, ["b"]),
    ]
    ((kind, _),) = catalog.apply(MODIFIED, "b", going)
    assert kind == DELETED
    assert catalog.apply(DELETED, "a", None) == []
