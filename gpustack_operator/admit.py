"""``gpustack-operator admit``: the server's admission chain run on manifests, offline.

Reads every object of every ``-f`` (files, directories read recursively for ``*.yaml``, ``*.yml``
and ``*.json``, ``-`` for standard input), judges each through :func:`webhooks.chain.run` against
the cluster objects given as files (``--objects``) or read from a live cluster (``--kubeconfig``),
and prints one result per object and the counts (:mod:`gpustack_operator.admit_report`).

Exit 0 when no object is denied (allowed and skipped ones only), 1 when any is denied, 2 when the
input cannot be used (unreadable file, YAML that does not parse, a document that is not a
Kubernetes object, an unknown ``-o``, a cluster that cannot be read); an exit 2 prints one line on
standard error and nothing on standard output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

from api import schema
from gpustack_operator import admit_report
from gpustack_operator.admit_report import DENIED, SKIPPED, Result
from webhooks import chain, documents, registry
from webhooks.lookups import FileLookups, LookupFailed, Lookups
from webhooks.review import AdmissionRequest

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """Unusable input; the message names the file, the document index and the field."""


def load_documents(source: str) -> list[dict[str, Any]]:
    """Every object of ``source`` (a path, or ``-`` for stdin), read by :mod:`webhooks.documents`."""
    return [obj for _, _, obj in load_located(source)]


def load_located(source: str, *, flag: str = "-f") -> list[tuple[str, int, dict[str, Any]]]:
    """``(file, document index, object)`` for every object of ``source``: a file, ``-``, or a
    directory read recursively (sorted by path) for the manifest suffixes."""
    found: list[tuple[str, int, dict[str, Any]]] = []
    for path in _paths(source, flag):
        try:
            label, text = documents.read_text(path)
            found.extend((label, index, obj) for index, obj in documents.indexed_objects(text, label))
        except documents.DocumentError as error:
            raise InputError(str(error)) from None
    return found


def _paths(source: str, flag: str) -> list[str]:
    if source == "-" or not Path(source).is_dir():
        return [source]
    try:
        paths = sorted(p for p in Path(source).rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
    except OSError as error:
        raise InputError(f"{source}: cannot read the directory: {error.strerror or error}") from None
    if not paths and flag == "-f":
        raise InputError(f"-f {source}: the directory holds no *.yaml, *.yml or *.json file")
    return [str(p) for p in paths]


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


def covered(doc: dict[str, Any], operation: str) -> bool:
    """Whether the apiserver would let the operator judge ``doc``: one of our CRD schemas serves it,
    or a webhook is registered for its kind and ``operation`` (object selectors aside)."""
    if schema.schema_for(str(doc.get("apiVersion")), str(doc.get("kind"))) is not None:
        return True
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    request = AdmissionRequest(
        uid="",
        operation=operation,
        group=group,
        version=version,
        kind=str(doc.get("kind", "")),
        resource="",
        sub_resource="",
        namespace="",
        name="",
        object=doc,
        old_object=None,
    )
    return any(webhook.selects(request) for webhook in registry.WEBHOOKS)


def _stdin_once(args: argparse.Namespace) -> None:
    given = [
        flag
        for flag, values in (("-f", args.filename), ("--objects", args.objects), ("--old", args.old))
        for value in values
        if value == "-"
    ]
    if len(given) > 1:
        raise InputError(
            f"standard input (-) can be read once; it was given {len(given)} times ({', '.join(given)})"
        )


def _file_lookups(args: argparse.Namespace) -> FileLookups:
    objects: list[dict[str, Any]] = []
    for source in args.objects:
        try:
            objects.extend(obj for _, _, obj in load_located(source, flag="--objects"))
        except InputError as error:
            raise InputError(f"--objects: {error}") from None
    return FileLookups(objects)


def _lookups(args: argparse.Namespace) -> Lookups:
    files = _file_lookups(args)
    if not args.kubeconfig:
        return files
    from gpustack_operator import admit_cluster

    try:
        client = admit_cluster.connect(args.kubeconfig)
    except ValueError as error:
        raise InputError(str(error)) from None
    cluster = admit_cluster.ClusterLookups(client, files, label=f"the cluster of {args.kubeconfig}")
    try:
        cluster.check()
    except LookupFailed as error:
        raise InputError(str(error)) from None
    return cluster


async def _judge(
    file: str, index: int, doc: dict[str, Any], old: dict[str, Any] | None, lookups: Lookups, operation: str
) -> Result:
    meta = doc.get("metadata") or {}
    result = Result(
        file=file,
        index=index,
        kind=str(doc.get("kind", "")),
        namespace=meta.get("namespace", ""),
        name=meta.get("name") or meta.get("generateName", ""),
        operation=operation,
        decision=SKIPPED,
        object=doc,
    )
    if not covered(doc, operation):
        result.message = (
            f"no webhook of the operator admits {doc.get('apiVersion')} {result.kind} on {operation}"
        )
        return result
    try:
        outcome = await chain.run(doc, lookups, operation=operation, old=old)
    except LookupFailed as error:
        raise InputError(str(error)) from None
    failure = getattr(lookups, "failure", None)
    if failure:  # a handler turned a failed cluster read into a denial: not a decision to print
        raise InputError(failure)
    result.decision = admit_report.ALLOWED if outcome.allowed else DENIED
    result.code, result.message, result.warnings = outcome.code, outcome.message, outcome.warnings
    result.patch, result.object = outcome.patch, outcome.object
    return result


async def _admit_all(args: argparse.Namespace) -> int:
    if args.output not in admit_report.FORMATS:
        raise InputError(
            f"-o {args.output}: unknown output format; use one of {', '.join(admit_report.FORMATS)}"
        )
    _stdin_once(args)
    located = [
        (file, index, _place(doc, args.namespace))
        for source in args.filename
        for file, index, doc in load_located(source)
    ]
    olds: dict[tuple[str, str, str], dict[str, Any]] = {}
    if args.old:
        for source in args.old:
            for _, _, doc in load_located(source, flag="--old"):
                olds[_key(_place(doc, args.namespace), args.namespace)] = doc
    elif args.operation == "UPDATE":
        raise InputError("--operation UPDATE needs --old OLDFILE holding the stored objects")
    lookups = _lookups(args)
    results: list[Result] = []
    for file, index, doc in located:
        old = olds.get(_key(doc, args.namespace))
        if args.operation == "UPDATE" and old is None and covered(doc, args.operation):
            kind, namespace, name = _key(doc, args.namespace)
            raise InputError(f"{file}: document {index}: --old holds no {kind} {namespace}/{name} to update")
        results.append(await _judge(file, index, doc, old, lookups, args.operation))
    chunks, summary = admit_report.render(results, args.output)
    out = _Output(sys.stdout.buffer)
    for chunk in chunks:
        out.write(chunk)
    out.flush()
    if summary:
        with contextlib.suppress(OSError):
            print(summary, file=sys.stderr)
    return 1 if any(r.decision == DENIED for r in results) else 0


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
