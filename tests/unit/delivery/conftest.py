"""Fixtures for the delivery tests: a local hub in this process, with a few repositories."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeplugins.modelmanager.capacity import Usage
from tests.hub.repos import write_random
from tests.hub.server import HubServer

TOKEN = "hf_reader_token_for_tests"
OTHER_TOKEN = "hf_someone_else"
LARGE_SIZE = 12 << 20


class SimulatedDisk:
    """The cache filesystem a node agent sees: ``total`` bytes, ``others`` of them used by files
    outside the cache, plus every byte under the cache root. Tests read it instead of statvfs, so
    their outcome does not hang on how full the machine running them is."""

    def __init__(self, total: int = 1 << 30, others: int = 0) -> None:
        self.total, self.others = total, others

    def __call__(self, root: Path) -> Usage:
        held = 0
        for directory, _, files in os.walk(root):
            for name in files:
                try:  # a download renames and removes files while this walks
                    held += os.lstat(os.path.join(directory, name)).st_size
                except FileNotFoundError:
                    continue
        return Usage(self.total, self.others + held)


@pytest.fixture(autouse=True)
def _no_ambient_hub_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """No token or endpoint from the machine leaks into a test (huggingface_hub reads them)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session")
def large_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random(tmp_path_factory.mktemp("large") / "weights.bin", LARGE_SIZE, seed=7)


@pytest.fixture
def hub(tmp_path: Path, large_file: Path) -> Iterator[HubServer]:
    """A hub serving ``org/public`` (small files, a nested directory, one large LFS file),
    ``org/private`` (readable with TOKEN) and ``org/gated`` (granted to TOKEN)."""
    server = HubServer(tmp_path / "hub", page_size=3)
    repos = server.repos
    repos.add_user(OTHER_TOKEN, "someone")
    repos.create("org/public")
    repos.commit(
        "org/public",
        {
            "config.json": b'{"hidden_size": 64}\n',
            "README.md": b"# tiny\n",
            "tokenizer/vocab.txt": b"a\nb\nc\n",
            "tokenizer/merges.txt": b"a b\n",
            "model.safetensors": large_file,
        },
    )
    for name, kind in (("org/private", {"private": True}), ("org/gated", {"gated": True})):
        repos.create(name, **kind)
        repos.commit(name, {"config.json": b"{}\n", "model.safetensors": b"\x00" * 4096})
        repos.grant(name, TOKEN)
    with server:
        yield server
