"""The model an engine is told to load: a directory of weights, or a Hub repository it downloads.

A directory must hold a ``config.json`` that parses as a JSON object and at least one weights file
(``*.safetensors``, ``*.bin``, ``*.pt``, ``*.gguf``) whose first and last bytes can be read. A name
that is no existing path is a Hub repository: it is downloaded as the engines do, through
huggingface_hub under ``HF_HOME`` from ``HF_ENDPOINT``, then checked the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from standin.cli import Refused

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


@dataclass(frozen=True)
class Model:
    path: Path
    config: dict
    weight_files: int
    weight_bytes: int


def _readable(path: Path) -> int:
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.read(4096)
        if size > 4096:
            handle.seek(size - 1)
            handle.read(1)
    return size


def check_directory(path: Path) -> Model:
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_bytes())
    except FileNotFoundError:
        raise Refused(f"{path} holds no config.json: it is not a model directory") from None
    except (OSError, ValueError) as error:
        raise Refused(f"{config_file} cannot be read as JSON: {error}") from None
    if not isinstance(config, dict):
        raise Refused(f"{config_file} is not a JSON object")
    weights = [p for p in sorted(path.rglob("*")) if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    if not weights:
        raise Refused(f"{path} holds no weights file ({', '.join(WEIGHT_SUFFIXES)})")
    total = 0
    for weight in weights:
        try:
            total += _readable(weight)
        except OSError as error:
            raise Refused(f"weights file {weight} cannot be read: {error.strerror or error}") from None
    return Model(path, config, len(weights), total)


def resolve(model: str, revision: str | None = None) -> Model:
    path = Path(model)
    if path.is_dir():
        return check_directory(path)
    if model.startswith(("/", ".")):
        raise Refused(f"model path {model} does not exist or is not a directory")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:  # pragma: no cover - the image carries it
        raise Refused(f"{model} is not a directory and huggingface_hub is missing") from None
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    home = os.environ.get("HF_HOME")
    try:  # read here, not from huggingface_hub's import-time constants
        local = snapshot_download(
            model,
            revision=revision or None,
            token=os.environ.get("HF_TOKEN") or None,
            endpoint=endpoint,
            cache_dir=os.path.join(home, "hub") if home else None,
        )
    except (HfHubHTTPError, OSError, ValueError) as error:
        raise Refused(f"{model} could not be downloaded from {endpoint}: {error}") from None
    return check_directory(Path(local))
