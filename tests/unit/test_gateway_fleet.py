"""The fleet view of InstanceTypes (gateway.fleet): grouping, names, tiers, bundles, order, deltas."""

from __future__ import annotations

from fractions import Fraction

from gateway import amounts
from gateway.fleet import ADDED, DELETED, MODIFIED, Fleet, item_name
from tests.unit.gateway_objects import A10G_SPEC, CPU_SPEC, H100_DETAIL, H100_SPEC, instance_type

H100_NAME = "generic-nvidia-h100-80gb-hbm3-linux-amd64-12c-128g-100g"


def only(fleet: Fleet) -> dict:
    (item,) = fleet.to_json()["items"]
    return item


def candidates(item: dict) -> list[tuple[str, str]]:
    return [(c["cluster"], c["name"]) for tier in item["status"]["tiers"] for c in tier["candidates"]]


# Grouping and names ---------------------------------------------------------------------------


def test_one_item_per_pool_across_clusters_whatever_the_object_names():
    fleet = Fleet().load(
        [("a", instance_type("h100-on-a")), ("b", instance_type("pool-7")), ("c", instance_type("x"))]
    )
    item = only(fleet)
    assert item["name"] == H100_NAME
    assert candidates(item) == [("a", "h100-on-a"), ("b", "pool-7"), ("c", "x")]


def test_inactive_display_name_and_description_do_not_split_a_pool():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", displayName="H100 (a)", description="east")),
            ("b", instance_type("t", inactive=True, phase="Inactive")),
            ("c", instance_type("t", inactive=False)),
        ]
    )
    assert len(fleet) == 1


def test_an_empty_value_equals_an_absent_one_in_the_grouping():
    bare = {k: v for k, v in H100_SPEC.items()}
    fleet = Fleet().load([("a", instance_type("t", bare)), ("b", instance_type("t", displayName=""))])
    assert len(fleet) == 1


def test_a_different_identity_field_is_another_item():
    fleet = Fleet().load(
        [
            ("a", instance_type("t")),
            ("b", instance_type("t", arch="arm64")),
            ("c", instance_type("t", localStorage="200Gi")),
        ]
    )
    assert [i["name"] for i in fleet.to_json()["items"]] == [
        H100_NAME,
        H100_NAME.replace("-100g", "-200g"),
        H100_NAME.replace("amd64", "arm64"),
    ]


def test_item_names_are_built_from_the_spec_alone():
    assert item_name(H100_SPEC) == H100_NAME
    assert item_name(CPU_SPEC) == "generic-linux-amd64-2g-100g"
    assert item_name({**CPU_SPEC, "unitResources": {"cpu": "1", "ram": "1536Mi"}}) == (
        "generic-linux-amd64-1536Mig-100g"
    )
    assert item_name({}) == "---g-g"  # a malformed spec still names something, never raises


# Tiers and bundles ----------------------------------------------------------------------------


def test_tiers_group_candidates_by_accelerator_once_max_request_ascending():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", ex=(8, 8, 8))),
            ("b", instance_type("t", ex=(1, 3, 8))),
            ("c", instance_type("t", ex=(8, 16, 16))),
        ]
    )
    tiers = only(fleet)["status"]["tiers"]
    assert [t["onceMaxRequest"]["accelerator"] for t in tiers] == ["1", "8"]
    assert [[c["cluster"] for c in t["candidates"]] for t in tiers] == [["b"], ["a", "c"]]
    assert [t["remaining"]["accelerator"] for t in tiers] == ["3", "24"]


def test_remaining_sums_active_candidates_only_and_non_active_stay_listed():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", ex=(1, 2, 8), sh=(10, 20, 80), cpu=(64, 100, 128))),
            ("b", instance_type("t", ex=(1, 5, 8), sh=(10, 50, 80), cpu=(64, 30, 128))),
            ("c", instance_type("t", ex=(1, 7, 8), phase="Inactive")),
            ("d", instance_type("t", ex=(1, 4, 8), phase="Draining")),
        ]
    )
    item = only(fleet)
    (tier,) = item["status"]["tiers"]
    assert [c["phase"] for c in tier["candidates"]] == ["Active", "Active", "Inactive", "Draining"]
    assert tier["remaining"] == item["status"]["remaining"]
    assert item["status"]["remaining"] == {
        "accelerator": "7",
        "acceleratorShared": "70",
        "acceleratorSliced": "400",
        "cpu": "130",
    }


def test_once_max_request_is_the_whole_bundle_of_one_real_candidate():
    # CPU-only: the primary dimension is cpu; the winner's other dimensions come with it.
    fleet = Fleet().load(
        [
            ("a", instance_type("t", CPU_SPEC, ex=(0, 0, 0), sh=(0, 7, 0), cpu=(16, 16, 16))),
            ("b", instance_type("t", CPU_SPEC, ex=(0, 0, 0), sh=(0, 3, 0), cpu=(48, 48, 48))),
            ("c", instance_type("t", CPU_SPEC, ex=(0, 0, 0), cpu=(96, 96, 96), phase="Inactive")),
        ]
    )
    status = only(fleet)["status"]
    assert status["onceMaxRequest"]["cpu"] == "48"
    assert status["onceMaxRequest"]["acceleratorShared"] == "0"
    assert status["remaining"]["cpu"] == "64"


def test_the_first_active_candidate_seeds_a_tier_even_at_zero_on_the_primary():
    # A fully sliced pool: no whole card (EX once 0) but slices left.
    fleet = Fleet().load([("a", instance_type("t", ex=(0, 0, 8), sl=(40, 240, 800)))])
    status = only(fleet)["status"]
    assert status["onceMaxRequest"]["accelerator"] == "0"
    assert status["onceMaxRequest"]["acceleratorSliced"] == "40"


def test_an_all_zero_tier_cannot_seed_the_item_bundle():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", ex=(2, 2, 8), phase="Inactive")),  # tier 2: zero (inactive)
            ("b", instance_type("t", ex=(0, 0, 8), sl=(30, 30, 800))),  # tier 0: sliced only
        ]
    )
    status = only(fleet)["status"]
    assert status["onceMaxRequest"]["acceleratorSliced"] == "30"
    # both tiers bundle to zero on the primary dimension: ties go by the tiers' own value
    assert [t["candidates"][0]["cluster"] for t in status["tiers"]] == ["b", "a"]


def test_an_item_with_no_active_candidate_shows_zero():
    fleet = Fleet().load([("a", instance_type("t", phase="Inactive"))])
    status = only(fleet)["status"]
    assert status["onceMaxRequest"] == {
        "accelerator": "0",
        "acceleratorShared": "0",
        "acceleratorSliced": "0",
        "cpu": "0",
    }
    assert status["remaining"]["accelerator"] == "0"


def test_the_item_takes_the_bundle_of_the_winning_tier():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", ex=(1, 1, 8), cpu=(99, 99, 99))),
            ("b", instance_type("t", ex=(4, 4, 8), cpu=(12, 12, 12))),
        ]
    )
    status = only(fleet)["status"]
    assert status["onceMaxRequest"]["accelerator"] == "4"
    assert status["onceMaxRequest"]["cpu"] == "12"  # from the same tier, not the largest cpu


def test_partitioned_profiles_cap_once_at_one_and_sum_remaining_by_name():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", pt=(1, 3, 7), remaining_profiles=[("1g.10gb", 3), ("7g.80gb", 0)])),
            ("b", instance_type("t", pt=(1, 7, 7), remaining_profiles=[("1g.10gb", 7), ("3g.40gb", 2)])),
            ("c", instance_type("t", pt=(1, 7, 7), remaining_profiles=[("1g.10gb", 7)], phase="Inactive")),
        ]
    )
    status = only(fleet)["status"]
    assert status["remaining"]["acceleratorPartitioned"] == [
        {"name": "1g.10gb", "count": 10},
        {"name": "3g.40gb", "count": 2},
        {"name": "7g.80gb", "count": 0},
    ]
    assert status["onceMaxRequest"]["acceleratorPartitioned"] == [
        {"name": "1g.10gb", "count": 1},
        {"name": "7g.80gb", "count": 0},
    ]
    (tier,) = status["tiers"]
    assert tier["candidates"][0]["acceleratorPartitioned"]["remainingProfiles"][0] == {
        "name": "1g.10gb",
        "count": 3,
    }


def test_no_partitioned_card_means_no_partitioned_dimension():
    status = only(Fleet().load([("a", instance_type("t"))]))["status"]
    assert "acceleratorPartitioned" not in status["remaining"]
    assert "acceleratorPartitioned" not in status["onceMaxRequest"]


def test_candidates_carry_every_view_as_the_cluster_wrote_it():
    obj = instance_type("t", detail=H100_DETAIL, remaining_profiles=[("1g.10gb", 2)])
    (tier,) = only(Fleet().load([("a", obj)]))["status"]["tiers"]
    (candidate,) = tier["candidates"]
    assert candidate == {
        "cluster": "a",
        "name": "t",
        "phase": "Active",
        "accelerator": obj["status"]["accelerator"],
        "acceleratorShared": obj["status"]["acceleratorShared"],
        "acceleratorSliced": obj["status"]["acceleratorSliced"],
        "acceleratorPartitioned": obj["status"]["acceleratorPartitioned"],
        "cpu": obj["status"]["cpu"],
        "acceleratorSlicedDetail": H100_DETAIL["slicedDetail"],
    }


def test_detail_is_adopted_from_a_ready_candidate_and_sliced_detail_is_summed_over_all():
    pending = instance_type("t")  # not reconciled yet: no detail
    ready = instance_type("t", detail=H100_DETAIL, phase="Inactive")
    status = only(Fleet().load([("a", pending), ("b", ready), ("c", ready)]))["status"]
    assert status["detail"]["manufacturer"] == "nvidia"
    assert status["detail"]["product"] == "NVIDIA H100 80GB HBM3"
    assert status["detail"]["slicedDetail"] == {
        "logical": {"count": 20},
        "physical": {
            "profiles": [{"name": "1g.10gb", "count": 14}, {"name": "7g.80gb", "count": 2}],
            "count": 14,
        },
    }
    assert status["tiers"][0]["acceleratorSlicedDetail"] == status["detail"]["slicedDetail"]


def test_quantities_add_exactly_in_any_form():
    fleet = Fleet().load(
        [
            ("a", instance_type("t", cpu=(4, "1500m", 8))),
            ("b", instance_type("t", cpu=(4, "2k", 8))),
            ("c", instance_type("t", cpu=(4, "garbage", 8))),
        ]
    )
    assert only(fleet)["status"]["remaining"]["cpu"] == "2001500m"
    assert amounts.text(Fraction(1, 3)) == "333333334n"


# Order ------------------------------------------------------------------------------------------


def test_acceleratable_items_first_then_by_name():
    fleet = Fleet().load(
        [
            ("a", instance_type("cpu", CPU_SPEC)),
            ("a", instance_type("h100")),
            ("a", instance_type("a10g", A10G_SPEC)),
            ("a", instance_type("cpu-arm", {**CPU_SPEC, "arch": "arm64"})),
        ]
    )
    assert [i["name"] for i in fleet.to_json()["items"]] == [
        "generic-nvidia-a10g-linux-amd64-8c-32g-100g",
        H100_NAME,
        "generic-linux-amd64-2g-100g",
        "generic-linux-arm64-2g-100g",
    ]


# Deltas -----------------------------------------------------------------------------------------


def test_a_new_pool_is_added_with_its_bundles_computed():
    fleet = Fleet()
    ((kind, item),) = fleet.apply(ADDED, "a", instance_type("t", ex=(2, 5, 8), phase="Active"))
    assert kind == ADDED
    assert item["status"]["remaining"]["accelerator"] == "5"
    assert item["status"]["onceMaxRequest"]["accelerator"] == "2"


def test_a_new_pool_whose_first_candidate_is_inactive_is_added_at_zero():
    ((kind, item),) = Fleet().apply(ADDED, "a", instance_type("t", phase="Inactive"))
    assert kind == ADDED
    assert item["status"]["remaining"]["accelerator"] == "0"


def test_a_new_candidate_or_tier_modifies_the_item_keeping_tiers_sorted():
    fleet = Fleet().load([("a", instance_type("t", ex=(4, 4, 8)))])
    ((kind, item),) = fleet.apply(ADDED, "b", instance_type("t", ex=(4, 8, 8)))
    assert kind == MODIFIED
    assert len(item["status"]["tiers"]) == 1
    ((kind, item),) = fleet.apply(ADDED, "c", instance_type("t", ex=(2, 2, 8)))
    assert kind == MODIFIED
    assert [t["onceMaxRequest"]["accelerator"] for t in item["status"]["tiers"]] == ["2", "4"]
    assert item["status"]["remaining"]["accelerator"] == "14"


def test_an_update_in_place_and_a_move_between_tiers():
    fleet = Fleet().load([("a", instance_type("t", ex=(4, 4, 8))), ("b", instance_type("t", ex=(4, 6, 8)))])
    ((kind, item),) = fleet.apply(MODIFIED, "a", instance_type("t", ex=(4, 5, 8)))
    assert kind == MODIFIED
    assert item["status"]["remaining"]["accelerator"] == "11"
    # a card taken on a: its largest free bundle drops to 3, so it moves to a new tier
    ((kind, item),) = fleet.apply(MODIFIED, "a", instance_type("t", ex=(3, 3, 8)))
    tiers = item["status"]["tiers"]
    assert [(t["onceMaxRequest"]["accelerator"], [c["cluster"] for c in t["candidates"]]) for t in tiers] == [
        ("3", ["a"]),
        ("4", ["b"]),
    ]
    assert item["status"]["remaining"]["accelerator"] == "9"
    # and back: the emptied tier goes
    ((_, item),) = fleet.apply(MODIFIED, "a", instance_type("t", ex=(4, 4, 8)))
    assert [len(t["candidates"]) for t in item["status"]["tiers"]] == [2]
    assert candidates(item) == [("b", "t"), ("a", "t")]


def test_deactivating_a_candidate_drops_its_share_to_zero():
    fleet = Fleet().load([("a", instance_type("t", ex=(1, 3, 8))), ("b", instance_type("t", ex=(1, 5, 8)))])
    ((kind, item),) = fleet.apply(
        MODIFIED, "b", instance_type("t", ex=(1, 5, 8), phase="Inactive", inactive=True)
    )
    assert kind == MODIFIED
    assert item["status"]["remaining"]["accelerator"] == "3"
    assert [c["phase"] for c in item["status"]["tiers"][0]["candidates"]] == ["Active", "Inactive"]


def test_a_change_nobody_can_see_emits_nothing():
    obj = instance_type("t")
    fleet = Fleet().load([("a", obj)])
    resynced = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "2"}}
    assert fleet.apply(MODIFIED, "a", resynced) == []
    assert fleet.apply(ADDED, "a", obj) == []  # a replayed ADDED is an update, not a duplicate


def test_a_later_ready_detail_modifies_the_item():
    fleet = Fleet().load([("a", instance_type("t"))])
    ((kind, item),) = fleet.apply(MODIFIED, "a", instance_type("t", detail=H100_DETAIL))
    assert kind == MODIFIED
    assert item["status"]["detail"]["manufacturer"] == "nvidia"


def test_deletes_that_empty_a_tier_then_the_item():
    fleet = Fleet().load([("a", instance_type("t", ex=(1, 1, 8))), ("b", instance_type("t", ex=(2, 2, 8)))])
    ((kind, item),) = fleet.apply(DELETED, "a", instance_type("t"))
    assert kind == MODIFIED
    assert [t["onceMaxRequest"]["accelerator"] for t in item["status"]["tiers"]] == ["2"]
    assert fleet.apply(DELETED, "a", instance_type("t")) == []  # already gone
    assert fleet.apply(DELETED, "b", instance_type("t")) == [(DELETED, {"name": H100_NAME})]
    assert len(fleet) == 0


def test_an_object_being_deleted_counts_as_deleted():
    fleet = Fleet().load([("a", instance_type("t")), ("b", instance_type("t"))])
    going = instance_type("t")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    ((kind, item),) = fleet.apply(MODIFIED, "a", going)
    assert kind == MODIFIED
    assert candidates(item) == [("b", "t")]


def test_dropping_a_cluster_removes_its_candidates_from_every_item():
    fleet = Fleet().load(
        [
            ("a", instance_type("h", ex=(1, 1, 8))),
            ("a", instance_type("h2", ex=(2, 2, 8))),
            ("a", instance_type("c", CPU_SPEC)),
            ("b", instance_type("h", ex=(1, 4, 8))),
            ("b", instance_type("g", A10G_SPEC)),
        ]
    )
    changes = fleet.apply(DELETED, "a", None)
    assert sorted((kind, item["name"]) for kind, item in changes) == [
        (DELETED, "generic-linux-amd64-2g-100g"),
        (MODIFIED, H100_NAME),
    ]
    modified = next(item for kind, item in changes if kind == MODIFIED)
    assert candidates(modified) == [("b", "h")]
    assert modified["status"]["remaining"]["accelerator"] == "4"
    assert fleet.apply(DELETED, "a", None) == []


def test_a_recreated_object_with_another_spec_moves_items():
    fleet = Fleet().load([("a", instance_type("t")), ("b", instance_type("t"))])
    changes = fleet.apply(ADDED, "a", instance_type("t", A10G_SPEC))
    assert [kind for kind, _ in changes] == [MODIFIED, ADDED]
    assert candidates(changes[0][1]) == [("b", "t")]


def test_watch_deltas_reach_the_same_state_as_a_fresh_list():
    steps = [
        (ADDED, "a", instance_type("t", ex=(1, 2, 8))),
        (ADDED, "b", instance_type("t", ex=(4, 4, 8))),
        (ADDED, "b", instance_type("c", CPU_SPEC)),
        (MODIFIED, "a", instance_type("t", ex=(4, 6, 8))),
        (MODIFIED, "b", instance_type("t", ex=(2, 2, 8), phase="Draining")),
        (ADDED, "c", instance_type("t", ex=(0, 0, 8), sl=(50, 50, 800))),
        (DELETED, "a", instance_type("t")),
    ]
    live = Fleet()
    state: dict[tuple[str, str], dict] = {}
    for kind, cluster, obj in steps:
        live.apply(kind, cluster, obj)
        if kind == DELETED:
            state.pop((cluster, obj["metadata"]["name"]))
        else:
            state[(cluster, obj["metadata"]["name"])] = obj
    fresh = Fleet().load([(cluster, obj) for (cluster, _), obj in sorted(state.items())])
    assert live.to_json() == fresh.to_json()


def test_encoded_deltas_are_the_same_json_as_the_dicts():
    import orjson

    steps = [
        (ADDED, "a", instance_type("t", ex=(1, 2, 8), detail=H100_DETAIL)),
        (ADDED, "b", instance_type("t", ex=(4, 4, 8), remaining_profiles=[("1g.10gb", 3)])),
        (MODIFIED, "a", instance_type("t", ex=(4, 6, 8))),
        (DELETED, "a", None),
        (DELETED, "b", instance_type("t")),
    ]
    plain, encoded = Fleet(), Fleet(encoded=True)
    for kind, cluster, obj in steps:
        want = plain.apply(kind, cluster, obj)
        got = encoded.apply(kind, cluster, obj)
        assert [(k, orjson.loads(item)) for k, item in got] == want
