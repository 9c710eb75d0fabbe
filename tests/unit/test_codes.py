"""The family, device-mode, key-role and argv token-class codes have two spellings — a C enum in a .pxd for the
compiled modules, Python names for everything else and for the interpreted twins — tied together
here: by their text, and by what the compiled modules do with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api import constants
from api.manufacturers import BY_NAME
from fastpath import fit, keys, ledger, requests
from fastpath.cards import Demand
from fastpath.pure import is_compiled, load
from tests.unit.ledgers import H100, H100_PROFILES, T4, accelerator, devices, row

FASTPATH = Path(keys.__file__).parent
NVIDIA = BY_NAME["nvidia"]
FAMILIES = ("exclusive", "shared", "sliced", "partitioned")


def enum_members(pxd: str) -> dict[str, int]:
    """``NAME = value`` lines of the ``cdef enum:`` blocks of a .pxd."""
    members: dict[str, int] = {}
    inside = False
    for line in (FASTPATH / pxd).read_text().splitlines():
        if line.startswith("cdef enum"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            inside = False
        match = re.match(r"\s+([A-Z_]+)\s*=\s*(\d+)", line) if inside else None
        if match:
            members[match.group(1)] = int(match.group(2))
    return members


def test_the_compiled_modules_are_built() -> None:
    for module in (fit, keys, ledger, requests):
        assert is_compiled(module), f"{module.__name__} is not compiled: python setup.py build_ext --inplace"


def test_codes_pxd_spells_the_device_modes_of_api_constants() -> None:
    compiled = enum_members("codes.pxd")
    python = {name: value for name, value in vars(constants).items() if name.startswith("DEVICE_MODE_")}
    assert compiled == python
    assert len(python) == len(constants.FAMILY_NAMES)
    for name, code in python.items():
        assert constants.FAMILY_NAMES[code] == name.removeprefix("DEVICE_MODE_").lower()
        assert constants.FAMILY_CODES[constants.FAMILY_NAMES[code]] == code


def test_keys_pxd_spells_the_roles_of_the_interpreted_keys() -> None:
    compiled = enum_members("keys.pxd")
    interpreted = load("keys")
    python = {name: getattr(interpreted, name) for name in dir(interpreted) if name.startswith("ROLE_")}
    python.pop("ROLE_NAMES")
    assert compiled == python
    assert sorted(compiled.values()) == list(range(len(keys.ROLE_NAMES)))


def test_argv_pxd_spells_the_token_classes_of_the_interpreted_argv() -> None:
    interpreted = load("argv")
    compiled = enum_members("argv.pxd")
    assert compiled == {name: getattr(interpreted, name) for name in compiled}
    assert sorted(compiled) == ["AMBIGUOUS", "POSITIONAL", "RESOLVED", "UNKNOWN"]


@pytest.mark.parametrize("suffix, family", [("", "exclusive"), (".shared", "shared"), (".sliced", "sliced")])
def test_the_compiled_classifier_names_families_and_roles_by_the_python_spelling(suffix, family) -> None:
    assert keys.classify(NVIDIA.base + suffix) == (family, "token", "nvidia", "")
    assert keys.classify(f"device.gpustack.ai/{NVIDIA.name}.visibility")[:2] == ("visibility", "visibility")
    assert keys.classify(NVIDIA.base + ".partitioned.mig-1g.10gb")[:2] == ("partitioned", "profile")
    for role in keys.ROLE_NAMES[2:6]:
        assert keys.classify(f"{NVIDIA.base}.sliced.{role}")[1] == role


def test_the_compiled_facts_read_each_role_into_its_field() -> None:
    limits = {
        NVIDIA.base + ".sliced": "1",
        NVIDIA.base + ".sliced.units": "5",
        NVIDIA.base + ".sliced.cores-percentage": "6",
        NVIDIA.base + ".sliced.memory-percentage": "7",
        NVIDIA.base + ".sliced.memory-mib": "8",
    }
    facts = requests.scan_pod({"containers": [{"name": "c", "resources": {"limits": limits}}]})
    (container,) = facts.containers
    fields = (container.sliced, container.sliced_units, container.cores_percentage)
    assert (*fields, container.memory_percentage, container.memory_mib) == (1, 5, 6, 7, 8)
    assert container.families == 1 << constants.DEVICE_MODE_SLICED
    assert facts.family_names() == ["sliced"]
    assert facts.demand().family == "sliced"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_compiled_grant_puts_the_card_in_the_mode_of_its_family(family: str) -> None:
    if family == "partitioned":
        node = ledger.node_ledger(devices("h", H100, [accelerator(0, profiles=H100_PROFILES)]))
        demand = Demand(family, count=1, units=195_000, profile="1g.10gb")
    else:
        node = ledger.node_ledger(devices("t", T4, [accelerator(0)]))
        demand = Demand(family, count=1, units=160_000)
    assert fit.place(node, demand) is not None
    assert node.cards[0].mode == constants.FAMILY_CODES[family]


_FAMILY_LIMITS = {
    "exclusive": {NVIDIA.base: "1"},
    "shared": {NVIDIA.base + ".shared": "1"},
    "sliced": {NVIDIA.base + ".sliced": "1", NVIDIA.base + ".sliced.memory-percentage": "10"},
    "partitioned": {NVIDIA.base + ".partitioned": "1", NVIDIA.base + ".partitioned.mig-1g.10gb": "1"},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_compiled_pod_demand_carries_the_code_of_its_family(family: str) -> None:
    # PodFacts.demand builds its Demand in C (cards.new_demand) with the family's code: placing it
    # must put the card in that family's mode, as a Demand built from the family's name does.
    spec = {"containers": [{"name": "c", "resources": {"limits": _FAMILY_LIMITS[family]}}]}
    demand = requests.scan_pod(spec).demand(15360)
    assert demand is not None and demand.family == family
    if family == "partitioned":
        node = ledger.node_ledger(devices("h", H100, [accelerator(0, profiles=H100_PROFILES)]))
    else:
        node = ledger.node_ledger(devices("t", T4, [accelerator(0)]))
    assert fit.place(node, demand) is not None
    assert node.cards[0].mode == constants.FAMILY_CODES[family]


@pytest.mark.parametrize("mode", range(len(constants.FAMILY_NAMES)))
def test_the_compiled_ledger_reads_a_row_mode_as_written(mode: int) -> None:
    node = ledger.node_ledger(devices("t", T4, [accelerator(0)], [row(0, mode)]))
    assert node.cards[0].mode == mode
