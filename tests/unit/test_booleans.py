"""One boolean parser for Settings and deploy-time variables, and no environment read when ``api``
is imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from api.booleans import EnvironmentValueError, env_bool, parse_bool
from api.kueue import quota_check_strategy
from controllers.pools.node_capacity_keys import credits_enabled
from webhooks.lookups import FileLookups


@pytest.mark.parametrize("word", ["1", "t", "T", "TRUE", "true", "True", " true "])
def test_true_words(word: str) -> None:
    assert parse_bool(word) is True


@pytest.mark.parametrize("word", ["0", "f", "F", "FALSE", "false", "False"])
def test_false_words(word: str) -> None:
    assert parse_bool(word) is False


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "tRUE", "", "2"])
def test_other_words_are_errors(word: str) -> None:
    with pytest.raises(ValueError):
        parse_bool(word)


def test_env_bool_defaults_and_names_the_variable() -> None:
    assert env_bool("GPUSTACK_X", True, {}) is True
    assert env_bool("GPUSTACK_X", False, {"GPUSTACK_X": "  "}) is False
    assert env_bool("GPUSTACK_X", False, {"GPUSTACK_X": "True"}) is True
    with pytest.raises(EnvironmentValueError, match=r"GPUSTACK_X='yes': must be a boolean"):
        env_bool("GPUSTACK_X", False, {"GPUSTACK_X": "yes"})


def test_deploy_time_readers_share_the_parser() -> None:
    assert credits_enabled({"GPUSTACK_NODE_CREDITS_CAPACITY": "F"}) is False
    assert quota_check_strategy({"GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY": "1"}) is True
    with pytest.raises(EnvironmentValueError):
        quota_check_strategy({"GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY": "on"})


def _setting(name: str, value: str) -> dict:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": "gpustack-system"},
        "spec": {"value": value},
    }


@pytest.mark.parametrize(("stored", "expected"), [("True", True), ("1", True), ("F", False), ("yes", True)])
def test_webhooks_read_a_setting_as_controllers_do(stored: str, expected: bool) -> None:
    # "yes" is no boolean: both readers fall back to the registered default (true here).
    lookups = FileLookups([_setting("workload-fit-affinity", stored)])
    assert asyncio.run(lookups.setting_enabled("workload-fit-affinity")) is expected


def test_importing_api_reads_no_gpustack_variable() -> None:
    probe = (
        "import os\n"
        "reads = []\n"
        "real = os.environ.get\n"
        "os.environ.get = lambda k, d=None: (reads.append(k), real(k, d))[1]\n"
        "import api.crds, api.kueue, api.models, api.settings, api.engines, api.naming, api.units\n"
        "import api.unit_presets, api.schema, api.manufacturers, api.constants, api.booleans\n"
        "print([r for r in reads if r.startswith('GPUSTACK')])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
