"""``gpustack-operator admit``: the server's admission chain run on manifests, offline.

Prints one JSON line per input document and exits 0 when every document is allowed, 1 when any is
denied, 2 when the input cannot be used (unreadable file, YAML that does not parse, a document that
is not a Kubernetes object).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

import orjson

from webhooks import chain, documents
from webhooks.lookups import FileLookups


class InputError(Exception):
    """Unusable input; the message names the file, the document index and the field."""


def load_documents(source: str) -> list[dict[str, Any]]:
    """Every object of ``source`` (a path, or ``-`` for stdin), read by :mod:`webhooks.documents`."""
    try:
        return documents.read_objects(source)
    except documents.DocumentError as error:
        raise InputError(str(error)) from None


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
    docs = [_place(d, args.namespace) for d in load_documents(args.filename)]
    olds: dict[tuple[str, str, str], dict[str, Any]] = {}
    if args.old:
        for doc in load_documents(args.old):
            olds[_key(_place(doc, args.namespace), args.namespace)] = doc
    elif args.operation == "UPDATE":
        raise InputError("--operation UPDATE needs --old OLDFILE holding the stored objects")
    try:
        lookups = FileLookups.from_directory(args.objects) if args.objects else FileLookups()
    except documents.DocumentError as error:
        raise InputError(f"--objects: {error}") from None
    except OSError as error:
        raise InputError(f"--objects: {args.objects}: {error.strerror or error}") from None
    denied = False
    out = _Output(sys.stdout.buffer)
    for doc in docs:
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
        out.write(orjson.dumps(line) + b"\n")
        denied = denied or not outcome.allowed
    out.flush()
    return 1 if denied else 0


class OutputError(Exception):
    """The answer could not be written whole."""


class _Output:
    """Standard output with a ceiling and write errors as :class:`OutputError`: a run whose lines
    were not all written is an error exit, never a truncated success."""

    LIMIT = 2 * 1024**3

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.written > self.LIMIT:
            raise OutputError(f"the output would exceed {self.LIMIT} bytes; admit fewer documents at once")
        try:
            self.stream.write(data)
        except OSError as error:
            raise OutputError(f"cannot write to standard output: {error.strerror or error}") from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as error:
            raise OutputError(f"cannot write to standard output: {error.strerror or error}") from None


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_admit_all(args))
    except (InputError, OutputError) as error:
        with contextlib.suppress(OSError):
            print(f"gpustack-operator admit: {error}", file=sys.stderr)
        return 2
