"""The fleet view mirrors the InstanceType status: a view added to the CRD without a place in the
aggregate fails here (the reference guards the same with a reflection test over its Go types)."""

from __future__ import annotations

import typing

from api.models.base import alias_of, unwrap
from api.models.instance_type import InstanceTypeDetail, InstanceTypeResource, InstanceTypeStatus
from gateway import fleet
from gateway.fleet import Fleet
from tests.unit.gateway_objects import H100_DETAIL, instance_type


def _fields(model: type) -> dict[str, typing.Any]:
    return {alias_of(name, info): unwrap(info.annotation)[0] for name, info in model.model_fields.items()}


def test_every_status_field_is_either_carried_or_left_out_on_purpose():
    status_fields = set(_fields(InstanceTypeStatus))
    unplaced = status_fields - fleet.CARRIED - set(fleet.NOT_CARRIED)
    assert not unplaced, (
        f"InstanceTypeStatus gained {sorted(unplaced)}: carry it in gateway.fleet (a view goes into VIEWS, "
        "Candidate, Bundle and the tier/item folds) or list it in NOT_CARRIED with the reason"
    )
    stale = (fleet.CARRIED | set(fleet.NOT_CARRIED)) - status_fields
    assert not stale, f"gateway.fleet names status fields the CRD no longer has: {sorted(stale)}"


def test_the_views_are_exactly_the_status_resource_fields():
    views = {
        alias
        for alias, kind in _fields(InstanceTypeStatus).items()
        if isinstance(kind, type) and issubclass(kind, InstanceTypeResource)
    }
    assert views == set(fleet.VIEWS)
    assert set(fleet.SCALARS) | {fleet.PARTITIONED} == set(fleet.VIEWS)


def test_candidates_and_bundles_carry_every_view_and_the_descriptor_every_detail_field():
    detail = {alias: f"x-{alias}" for alias in _fields(InstanceTypeDetail)}
    detail.update(manufacturer="nvidia", slicedDetail=H100_DETAIL["slicedDetail"])
    obj = instance_type("t", detail=detail, remaining_profiles=[("1g.10gb", 1)])
    (item,) = Fleet().load([("a", obj)]).to_json()["items"]
    (tier,) = item["status"]["tiers"]
    (candidate,) = tier["candidates"]
    for view in fleet.VIEWS:
        assert candidate[view] == obj["status"][view]
        for bundle in (item["status"]["onceMaxRequest"], item["status"]["remaining"], tier["remaining"]):
            assert view in bundle
    assert set(item["status"]["detail"]) == set(detail)
