"""``admit --kubeconfig``: the cluster objects the decisions read, from a live apiserver.

Nothing is listed up front: a kind is read the first time a decision asks for it (a GET for one
object, a LIST for a kind's objects), and each answer is kept for the rest of the run, so only the
kinds the chain needs are read, each once.  The objects given as files (``--objects``) lie over the
cluster's: one with the same kind, namespace and name replaces the cluster's, others are added.
``admit`` never writes to the cluster.

A read that fails (unreachable apiserver, 401/403) raises :class:`ClusterReadFailed` and is kept
in :attr:`ClusterLookups.failure`: ``admit`` then stops with exit 2 rather than print decisions
made on a partial view (a handler that turns a failed read into a retryable denial is still seen).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from api.objects import Obj
from kube.client import ApiError, Client, load_api_client
from webhooks.lookups import FileLookups, LookupFailed, Lookups

TIMEOUT = 10.0  # seconds per request


class ClusterReadFailed(LookupFailed):
    """A read of the live cluster that failed; the message names the kind and the answer."""


def connect(kubeconfig: str) -> Client:
    """A client for the cluster of ``kubeconfig`` (its current context).  Raises ``ValueError``
    with one line when the file cannot be used.  Tests replace this with a fake apiserver."""
    # A refused connection is retried by urllib3, which logs each retry: admit says it in one line.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        return Client(load_api_client(kubeconfig, component="admit"), timeout=TIMEOUT)
    except Exception as error:  # the official loader raises ConfigException, OSError, YAML errors...
        text = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"--kubeconfig {kubeconfig}: cannot use it: {text}") from None


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class ClusterLookups(Lookups):
    """Reads from ``client`` on demand, with ``files`` laid over them."""

    def __init__(self, client: Client, files: FileLookups | None = None, *, label: str = "") -> None:
        self.client = client
        self.files = files or FileLookups()
        self.label = label or "the cluster"
        self.failure: str | None = None
        self._gets: dict[tuple[str, str, str], Obj | None] = {}
        self._lists: dict[tuple[str, str], list[Obj]] = {}

    async def _read(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(call, *args, **kwargs)
        except (ApiError, KeyError) as error:
            if isinstance(error, ApiError) and error.not_found:
                raise
            reason = error.args[0] if isinstance(error, KeyError) else str(error)
            self.failure = self.failure or f"--kubeconfig: reading {what} from {self.label} failed: {reason}"
            raise ClusterReadFailed(self.failure) from None

    def check(self) -> None:
        """Fail fast, before any decision, when the apiserver cannot be reached at all."""
        try:
            self.client.version()
        except ApiError as error:
            raise ClusterReadFailed(f"--kubeconfig: {self.label} does not answer: {error}") from None

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> Obj | None:
        given = await self.files.get(kind, name, namespace)
        if given is not None:
            return given
        for scope in ("", namespace):  # a kind already listed answers from that list
            listed = self._lists.get((kind, scope))
            if listed is not None:
                return next((o for o in listed if _key(o) == (namespace, name)), None)
        key = (kind, namespace, name)
        if key not in self._gets:
            where = f"{namespace}/{name}" if namespace else name
            self._gets[key] = await self._read(f"{kind} {where}", self.client.get, kind, name, namespace)
        return self._gets[key]

    async def list(self, kind: str, namespace: str = "") -> list[Obj]:
        key = (kind, namespace)
        if key not in self._lists:
            what = f"the {kind} objects" + (f" of namespace {namespace}" if namespace else "")
            try:
                items, _ = await self._read(what, self.client.list, kind, namespace)
            except ApiError:  # 404: the kind is not served there (Kueue not installed...): none exist
                items = []
            self._lists[key] = items
        merged = {_key(obj): obj for obj in self._lists[key]}
        for obj in await self.files.list(kind, namespace):
            merged[_key(obj)] = obj
        return list(merged.values())
