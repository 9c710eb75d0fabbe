"""Setting names live once, in api/setting_names.py: the registry's table and every reader use its
constants, so a renamed Setting cannot leave a reader behind on the old name."""

from __future__ import annotations

import ast
from pathlib import Path

from api import setting_names
from api.settings import SETTINGS
from tests.unit.test_layering import OURS as PACKAGES  # every package of ours, listed once

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "api" / "setting_names.py"


def _spelled() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(setting_names).items()
        if name.isupper() and isinstance(value, str)
    }


def test_every_setting_has_one_constant_and_every_constant_a_setting() -> None:
    values = list(_spelled().values())
    assert sorted(values) == sorted(SETTINGS)
    assert len(values) == len(set(values))


def test_no_setting_name_is_spelled_outside_its_module() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == HOME:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and node.value in SETTINGS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == [], "use api.setting_names instead of the literal:\n" + "\n".join(found)
