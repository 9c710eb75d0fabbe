"""``TopologySource``: where a cluster's topology hierarchy comes from.

Follows ``api/worker/v1alpha1/topology_source.go``: ``nodeSelector`` and the ordered ``levels``
(coarsest first; ``kubernetes.io/hostname`` is implicit and refused by the webhook), and exactly one
source arm: ``nodeLabels`` (read the Nodes' own labels), ``configMap`` or ``webhook`` (a versioned
snapshot written through NodeFeatures).
"""

from __future__ import annotations

from typing import ClassVar

from api.models.base import (
    AGE,
    CRD,
    Duration,
    Int32,
    Int64,
    PrinterColumn,
    QualifiedKey,
    Resource,
    Schema,
    Time,
    field,
)
from api.models.common import Condition, LabelSelector, conditions_field


class TopologySourceNodeLabels(Schema):
    """The read-only arm; its presence selects the labels already on the Nodes."""


class TopologySourceObjectReference(Schema):
    """A ConfigMap or Secret in the worker namespace."""

    namespace: str = field(required=True, always=True, max_length=63)
    name: str = field(required=True, always=True, max_length=253)


class TopologySourceConfigMap(Schema):
    config_map_ref: TopologySourceObjectReference = field(alias="configMapRef", required=True)
    key: str = field(required=True)
    max_staleness: Duration = field(alias="maxStaleness", required=True)


class TopologySourceWebhook(Schema):
    """An authenticated HTTPS snapshot endpoint; exactly one credential arm."""

    url: str = field(required=True)
    poll_interval: Duration = field(alias="pollInterval", required=True)
    timeout: Duration = field(required=True)
    max_staleness: Duration = field(alias="maxStaleness", required=True)
    ca_bundle_config_map_ref: TopologySourceObjectReference | None = field(alias="caBundleConfigMapRef")
    bearer_token_secret_ref: TopologySourceObjectReference | None = field(alias="bearerTokenSecretRef")
    tls_client_certificate_secret_ref: TopologySourceObjectReference | None = field(
        alias="tlsClientCertificateSecretRef"
    )


class TopologySourceSpec(Schema):
    node_selector: LabelSelector = field(alias="nodeSelector", required=True)
    levels: list[QualifiedKey] = field(
        required=True, list_type="atomic", min_length=1, max_length=16, doc="Label keys, coarsest first."
    )
    additional_write_prefix: str | None = field(alias="additionalWritePrefix", max_length=254)
    node_labels: TopologySourceNodeLabels | None = field(alias="nodeLabels")
    config_map: TopologySourceConfigMap | None = field(alias="configMap")
    webhook: TopologySourceWebhook | None = None


class TopologySourceProfileChange(Schema):
    """A live profile change the source leads to, pending or under way, and what it evicts or
    stops (ours; the reference has no such field): absent when none is."""

    profiles: list[str] | None = field(list_type="atomic", doc='"<old profile> -> <new profile>" moves.')
    nodes: Int32 | None = field(doc="Selected nodes whose profile label is still to change.")
    stop_policy: str | None = field(
        alias="stopPolicy", doc="How the queues below are held before the swap: HoldAndDrain or Hold."
    )
    cluster_queues: list[str] | None = field(
        alias="clusterQueues", list_type="atomic", doc="ClusterQueues held before their swap."
    )
    workloads: Int32 | None = field(doc="Workloads admitted in those queues: evicted under HoldAndDrain.")
    pods: Int32 | None = field(doc="Those Workloads' Pods.")
    instances: Int32 | None = field(doc="Instances the StopPolicy stops (HoldAndDrain only).")
    names: list[str] | None = field(list_type="atomic", doc="The first few of each, as '<Kind> <ns>/<name>'.")


class TopologySourceStatus(Schema):
    observed_generation: Int64 | None = field(alias="observedGeneration")
    source_kind: str | None = field(alias="sourceKind")
    last_successful_revision: str | None = field(alias="lastSuccessfulRevision")
    last_successful_refresh_time: Time | None = field(alias="lastSuccessfulRefreshTime")
    selected_nodes: Int32 | None = field(alias="selectedNodes")
    mutated_nodes: Int32 | None = field(alias="mutatedNodes")
    conflicted_nodes: Int32 | None = field(alias="conflictedNodes")
    profile_change: TopologySourceProfileChange | None = field(alias="profileChange")
    conditions: list[Condition] | None = conditions_field()


class TopologySource(Resource):
    """A cluster-scoped topology inventory used to form Kueue hierarchies."""

    __crd__: ClassVar[CRD] = CRD(
        kind="TopologySource",
        plural="topologysources",
        scope="Cluster",
        short_names=("toposrc",),
        columns=(
            PrinterColumn("Kind", ".status.sourceKind"),
            PrinterColumn("Revision", ".status.lastSuccessfulRevision"),
            PrinterColumn("Ready", ".status.conditions[?(@.type=='Ready')].status"),
            AGE,
        ),
    )

    spec: TopologySourceSpec = field(required=True)
    status: TopologySourceStatus | None = None
