"""``gpustack-operator admit``: the server's admission chain run on manifests, offline.

Prints one JSON line per input document and exits 0 when every document is allowed, 1 when any is
denied, 2 when the input cannot be used (unreadable file, YAML that does not parse, a document that
is not a Kubernetes object).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhooks import chain
from webhooks.lookups import FileLookups


class InputError(Exception):
    """Unusable input; the message names the file, the document index and the field."""


def load_documents(source: str) -> list[dict[str, Any]]:
    """Every non-empty document of ``source`` (a path, or ``-`` for stdin)."""
    label = "<stdin>" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as error:
        raise InputError(f"{label}: cannot read: {error.strerror or error}") from None
    documents: list[dict[str, Any]] = []
    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        index = text[: getattr(getattr(error, "problem_mark", None), "index", 0)].count("\n---")
        raise InputError(f"{label}: document {index}: YAML does not parse: {error}") from None
    for index, doc in enumerate(loaded):
        if doc is None:
            continue
        where = f"{label}: document {index}"
        if not isinstance(doc, dict):
            raise InputError(f"{where}: must be a mapping (a Kubernetes object), got {type(doc).__name__}")
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str) or not doc[key]:
                raise InputError(f"{where}: {key}: Required value: every object names its {key}")
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise InputError(f"{where}: metadata: Required value: must be a mapping with a name")
        if not isinstance(meta.get("name") or meta.get("generateName"), str):
            raise InputError(f"{where}: metadata.name: Required value: name or generateName is required")
        if doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
            documents.extend(doc["items"])
        else:
            documents.append(doc)
    return documents


def _key(doc: dict[str, Any], namespace: str) -> tuple[str, str, str]:
    meta = doc.get("metadata") or {}
    return (doc.get("kind", ""), meta.get("namespace") or namespace, meta.get("name", ""))


_CLUSTER_SCOPED = {
    "Namespace",
    "Node",
    "InstanceType",
    "InstanceTypeFlavor",
    "Devices",
    "NodeModelStore",
    "ModelStore",
    "KVCacheBackend",
    "KVCachePool",
    "TopologySource",
    "ClusterQueue",
    "ResourceFlavor",
}


def _place(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Give a namespaced document the default namespace, as kubectl would."""
    meta = doc.setdefault("metadata", {})
    if doc.get("kind") not in _CLUSTER_SCOPED and not meta.get("namespace"):
        meta["namespace"] = namespace
    return doc


async def _admit_all(args: argparse.Namespace) -> int:
    documents = [_place(d, args.namespace) for d in load_documents(args.filename)]
    olds: dict[tuple[str, str, str], dict[str, Any]] = {}
    if args.old:
        for doc in load_documents(args.old):
            olds[_key(_place(doc, args.namespace), args.namespace)] = doc
    elif args.operation == "UPDATE":
        raise InputError("--operation UPDATE needs --old OLDFILE holding the stored objects")
    try:
        lookups = FileLookups.from_directory(args.objects) if args.objects else FileLookups()
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise InputError(f"--objects: {error}") from None
    denied = False
    for doc in documents:
        old = olds.get(_key(doc, args.namespace))
        if args.operation == "UPDATE" and old is None:
            kind, namespace, name = _key(doc, args.namespace)
            raise InputError(f"{args.old}: holds no {kind} {namespace}/{name} to update")
        outcome = await chain.run(doc, lookups, operation=args.operation, old=old)
        meta = doc.get("metadata") or {}
        line = {
            "kind": doc.get("kind"),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name") or meta.get("generateName", ""),
            "operation": args.operation,
            "allowed": outcome.allowed,
            "code": outcome.code,
            "message": outcome.message,
            "warnings": outcome.warnings,
            "patch": outcome.patch,
            "object": outcome.object,
        }
        sys.stdout.write(orjson.dumps(line).decode() + "\n")
        denied = denied or not outcome.allowed
    return 1 if denied else 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_admit_all(args))
    except InputError as error:
        print(f"gpustack-operator admit: {error}", file=sys.stderr)
        return 2
