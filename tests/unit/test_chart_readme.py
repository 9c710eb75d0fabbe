"""charts/gpustack-operator/README.md lists every value of values.yaml (scripts/chart-readme.py writes
its table from the comments there): a value added or changed without running it fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpustack-operator"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "scripts" / "chart-readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_readme"] = module
    spec.loader.exec_module(module)
    return module


readme = _script()


def test_the_chart_readme_is_what_values_yaml_gives() -> None:
    current = (CHART / "README.md").read_text()
    assert current == readme.render(current, (CHART / "values.yaml").read_text()), (
        "charts/gpustack-operator/README.md is not what values.yaml gives: run scripts/chart-readme.py"
    )
    assert readme.main(["--check"]) == 0


def _leaves(node: object, path: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaves(v, f"{path}.{k}" if path else str(k))]
    return [path]


def test_every_value_has_a_row() -> None:
    """Each leaf of values.yaml is a row or lies under one (a map shown whole, or a manufacturer row)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    table = readme.table((CHART / "values.yaml").read_text())
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    for leaf in _leaves(values):
        parts = leaf.split(".")
        assert any(".".join(parts[:n]) in rows for n in range(1, len(parts) + 1)), leaf
    for name in values["global"]["manufacturers"]:
        assert name in rows


def test_a_comment_becomes_the_description_and_a_new_key_a_row() -> None:
    text = "a:\n  # What b does,\n  # in two lines.\n  b: 1\n\n  # not c's: a blank line follows\n\n  c: [x,\n      y]\n"
    text += "  d:\n    - {k: v}\n    - name: n\n      value: w\n  e: |\n    f: 2\n"
    text += "global:\n  manufacturers:\n    acme: {pciVendorID: '0001'}\n"
    found = {k.path: k.comment for k in readme.keys(text)}
    assert found == {
        "a": "",
        "a.b": "What b does, in two lines.",
        "a.c": "",
        "a.d": "",
        "a.e": "",
        "global": "",
        "global.manufacturers": "",
        "global.manufacturers.acme": "",
    }
    table = readme.table(text)
    assert "| `a.b` | `1` | What b does, in two lines. |" in table
    assert '| `a.c` | `["x", "y"]` |  |' in table and '| `acme` | `"0001"` |' in table


def test_a_stale_readme_is_refused_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = readme.render(
        (CHART / "README.md").read_text(), "x:\n  # gone\n  y: 1\nglobal: {manufacturers: {}}\n"
    )
    (tmp_path / "README.md").write_text(stale)
    (tmp_path / "values.yaml").write_text((CHART / "values.yaml").read_text())
    monkeypatch.setattr(readme, "CHART", tmp_path)  # the script reads CHART at call time
    assert readme.main(["--check"]) == 1
    assert "run scripts/chart-readme.py" in capsys.readouterr().err
    assert readme.main([]) == 0 and readme.main(["--check"]) == 0  # rewritten
