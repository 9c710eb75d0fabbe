"""Kubernetes objects read from YAML or JSON files, safely, for ``admit`` and the file lookups.

Whatever a file holds, the reader either returns objects or raises :class:`DocumentError` with one
line naming the file (and the document) and what is wrong — never a traceback, never unbounded
work:

- bytes that are not UTF-8 text (binary, UTF-16/32) are refused with the encoding named;
- a YAML error's multi-line position dump is folded into one line;
- nesting deeper than the parser can follow is refused;
- aliases may not expand the document by more than :data:`MAX_ALIAS_EXPANSION` nodes (a "billion
  laughs" file is refused before anything is built from it), and may not refer to themselves;
- every document is a mapping with string ``apiVersion`` and ``kind`` and a ``metadata`` mapping
  with a string ``name`` (or ``generateName``); a ``*List`` contributes its items, each checked.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from api.objects import Obj

MAX_ALIAS_EXPANSION = 10_000

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class DocumentError(ValueError):
    """Unusable input; the message is one line naming the file, the document and the problem."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def read_text(source: str) -> tuple[str, str]:
    """``(label, text)`` of a path, or of standard input for ``-``."""
    label = "<stdin>" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as error:
        raise DocumentError(f"{label}: cannot read: {error.strerror or error}") from None
    return label, decode(data, label)


def decode(data: bytes, label: str) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise DocumentError(f"{label}: is {encoding} text; save it as UTF-8")
    if b"\x00" in data:
        raise DocumentError(f"{label}: holds NUL bytes: not a text file (binary, or UTF-16 without a BOM?)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(
            f"{label}: is not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start}"
        ) from None


def _expanded_size(node: yaml.Node, label: str, index: int) -> int:
    """Nodes ``node`` stands for once every alias is expanded (shared subtrees counted each time
    they are reached); refuses cycles and anything past the bound as soon as it is seen."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    distinct = 0

    def size(current: yaml.Node) -> int:
        nonlocal distinct
        key = id(current)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise DocumentError(f"{label}: document {index}: an alias refers to itself (recursive YAML)")
        on_path.add(key)
        distinct += 1
        total = 1
        if isinstance(current, yaml.SequenceNode):
            total += sum(size(child) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in current.value)
        on_path.discard(key)
        sizes[key] = total
        if total - distinct > MAX_ALIAS_EXPANSION:
            raise DocumentError(
                f"{label}: document {index}: aliases expand it by more than {MAX_ALIAS_EXPANSION} nodes; "
                "write the repeated parts out or shrink them"
            )
        return total

    return size(node)


def parse(text: str, label: str) -> list[Any]:
    """Every document of ``text``, composed and checked before any is constructed."""
    loader = yaml.SafeLoader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _expanded_size(node, label, len(documents))
            documents.append(loader.construct_document(node))
    except yaml.YAMLError as error:
        raise DocumentError(
            f"{label}: document {len(documents)}: YAML does not parse: {_one_line(str(error))}"
        ) from None
    except RecursionError:
        raise DocumentError(f"{label}: document {len(documents)}: nested too deeply to read") from None
    finally:
        loader.dispose()
    return documents


def _checked(doc: Any, where: str) -> Obj:
    if not isinstance(doc, dict):
        raise DocumentError(f"{where}: must be a mapping (a Kubernetes object), got {type(doc).__name__}")
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            found = "" if key not in doc else f", got {type(doc[key]).__name__}"
            raise DocumentError(
                f"{where}: {key}: Required value: every object names its {key} as a string{found}"
            )
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise DocumentError(f"{where}: metadata: Required value: must be a mapping with a name")
    if not isinstance(meta.get("name") or meta.get("generateName"), str):
        raise DocumentError(
            f"{where}: metadata.name: Required value: name or generateName is required, as a string"
        )
    return doc


def objects(text: str, label: str) -> list[Obj]:
    """The Kubernetes objects of ``text``: empty documents skipped, ``*List`` items flattened."""
    return [obj for _, obj in indexed_objects(text, label)]


def indexed_objects(text: str, label: str) -> list[tuple[int, Obj]]:
    """:func:`objects`, each with the index of the YAML document it came from (the ``document N``
    of the error messages; every item of a ``*List`` shares its document's index)."""
    found: list[tuple[int, Obj]] = []
    for index, doc in enumerate(parse(text, label)):
        if doc is None:
            continue
        where = f"{label}: document {index}"
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise DocumentError(
                    f"{where}: items: Required value: a {doc['kind']} holds a list of objects"
                )
            found.extend((index, _checked(item, f"{where}: items[{i}]")) for i, item in enumerate(items))
        else:
            found.append((index, _checked(doc, where)))
    return found


def read_objects(source: str) -> list[Obj]:
    """The objects of a file (or ``-``), as :func:`objects` reads them."""
    label, text = read_text(source)
    return objects(text, label)
