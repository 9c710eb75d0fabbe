"""Where the gateway reaches each subscribed cluster: the three connection modes.

- ``gpustack-api`` (the reference's default): every cluster through the GPUStack server's
  per-cluster proxy, ``<scheme>://localhost:<port>/v2/clusters/<cluster>/proxy``, with the token
  given at subscribe time as the bearer.  https skips verification, as the reference does.
- ``loopback``: one kubeconfig (or the in-cluster account) for every cluster name; the token is
  ignored.  For a single cluster, and tests.
- ``kubeconfig-dir`` (our addition): the kubeconfig of cluster ``<name>`` is the file ``<name>``,
  ``<name>.yaml`` or ``<name>.kubeconfig`` in a directory, so one gateway serves several real
  clusters with no proxy in front; the token is ignored.

A source builds a :class:`~gateway.kubeapi.ClusterClient` for a cluster name or raises
:class:`SourceError` with the HTTP status the subscriber should get.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from gateway.kubeapi import ClusterClient, RateLimit

CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
POOL_SIZE = 16  # connections per cluster: one per informer's watch, plus reads


class SourceError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def check_cluster_name(name: str) -> None:
    """Cluster names travel in URL paths and file names: letters, digits, ``.``, ``_``, ``-``."""
    if not CLUSTER_NAME.fullmatch(name) or name in (".", ".."):
        raise SourceError(
            400,
            f"cluster {name!r} is not a cluster name: use up to 253 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit",
        )


@dataclass(frozen=True, slots=True)
class Connection:
    """Client settings shared by every cluster (``--kube-conn-*``)."""

    timeout: float = 300.0
    qps: float = 200.0
    burst: int = 400


class ClusterSource(Protocol):
    mode: str

    def connect(self, cluster: str, token: str) -> ClusterClient: ...

    def describe(self) -> str: ...


def _client(configuration: k8s.Configuration, connection: Connection) -> ClusterClient:
    configuration.connection_pool_maxsize = POOL_SIZE
    # A read that timed out is not retried underneath: the caller's timeout bounds the whole call
    # (a readiness check abandoned at its timeout must not go on asking the cluster), and every
    # caller retries with its own back-off. A connection that never opened is still retried.
    configuration.retries = urllib3.Retry(total=3, read=0)
    return ClusterClient(
        k8s.ApiClient(configuration),
        timeout=connection.timeout,
        limit=RateLimit(connection.qps, connection.burst),
    )


class GPUStackAPISource:
    """Each cluster through the GPUStack server's per-cluster proxy, with the cluster's token."""

    mode = "gpustack-api"

    def __init__(self, port: int, scheme: str = "", connection: Connection | None = None) -> None:
        self.port = port
        self.scheme = scheme or ("https" if port == 443 else "http")
        self.connection = connection or Connection()

    def url(self, cluster: str) -> str:
        return f"{self.scheme}://localhost:{self.port}/v2/clusters/{cluster}/proxy"

    def connect(self, cluster: str, token: str) -> ClusterClient:
        check_cluster_name(cluster)
        configuration = k8s.Configuration()
        configuration.host = self.url(cluster)
        configuration.verify_ssl = False
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return _client(configuration, self.connection)

    def describe(self) -> str:
        return f"GPUStack API proxy {self.url('<cluster>')}"


class LoopbackSource:
    """Every cluster name is the one cluster of a kubeconfig (or the in-cluster account)."""

    mode = "loopback"

    def __init__(self, kubeconfig: str | None = None, connection: Connection | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.connection = connection or Connection()
        self._configuration: k8s.Configuration | None = None

    def _load(self) -> k8s.Configuration:
        if self._configuration is None:
            configuration = k8s.Configuration()
            try:
                if self.kubeconfig:
                    k8s_config.load_kube_config(
                        config_file=self.kubeconfig, client_configuration=configuration
                    )
                else:
                    try:
                        k8s_config.load_incluster_config(client_configuration=configuration)
                    except k8s_config.ConfigException:
                        k8s_config.load_kube_config(client_configuration=configuration)
            except Exception as error:  # YAML, missing keys, bad certificates: the loader raises them all
                raise SourceError(500, f"loopback: cannot load a kubeconfig: {error}") from None
            self._configuration = configuration
        return self._configuration

    def connect(self, cluster: str, token: str) -> ClusterClient:
        check_cluster_name(cluster)
        return _client(self._load(), self.connection)

    def describe(self) -> str:
        return f"loopback ({self.kubeconfig or 'in-cluster, else $KUBECONFIG'})"


class KubeconfigDirSource:
    """Cluster ``<name>``'s kubeconfig is ``<dir>/<name>`` (or ``.yaml``, ``.kubeconfig``)."""

    mode = "kubeconfig-dir"
    SUFFIXES = ("", ".yaml", ".kubeconfig")

    def __init__(self, directory: str | Path, connection: Connection | None = None) -> None:
        self.directory = Path(directory)
        self.connection = connection or Connection()

    def path(self, cluster: str) -> Path | None:
        for suffix in self.SUFFIXES:
            candidate = self.directory / f"{cluster}{suffix}"
            if candidate.is_file():
                return candidate
        return None

    def connect(self, cluster: str, token: str) -> ClusterClient:
        check_cluster_name(cluster)
        path = self.path(cluster)
        if path is None:
            raise SourceError(
                404,
                f"cluster {cluster!r} has no kubeconfig in {self.directory}: add {cluster}, {cluster}.yaml "
                f"or {cluster}.kubeconfig there",
            )
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
        except Exception as error:  # YAML, missing keys, bad certificates: the loader raises them all
            raise SourceError(
                400, f"cluster {cluster!r}: {path} is not a usable kubeconfig: {error}"
            ) from None
        return _client(configuration, self.connection)

    def describe(self) -> str:
        return f"kubeconfig directory {self.directory}"
