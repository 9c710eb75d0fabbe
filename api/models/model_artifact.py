"""``ModelArtifact``: where a model's weights come from and which credential reads them.

Follows ``api/worker/v1alpha1/model_artifact.go``: ``spec.source`` is a union of ``huggingFace``,
``modelScope`` and ``persistentVolumeClaim``, with ``allowPatterns``/``ignorePatterns`` selecting a hub
source's files; the status carries ``resolved`` (the pinned commit and manifest digest), ``nodes``
(where the content is) and the ``Resolved``/``Degraded`` conditions.

Added from the model-delivery spec (§2.1, newer than the stored type): ``spec.source.image``
(an OCI image pinned by digest), ``spec.expectedDigest`` (an anchor) and ``status.resolved.digestSource``.

The whole spec is immutable after creation (one CEL transition rule on ``spec``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.models.base import (
    AGE,
    CRD,
    Int32,
    Int64,
    Pattern,
    PrinterColumn,
    Resource,
    Rule,
    Schema,
    Time,
    field,
)
from api.models.common import RELATIVE_PATH, Condition, LocalObjectReference, conditions_field

DIGEST = r"^sha256:[0-9a-f]{64}$"


class ModelArtifactHubSource(Schema):
    """One repository on a model hub at one revision (resolved once, to a commit)."""

    repository: str = field(
        required=True, min_length=1, max_length=256, doc="owner/name, or a bare canonical name."
    )
    revision: str | None = field(max_length=255, doc="Branch, tag or commit; defaulted by admission.")
    secret_ref: LocalObjectReference | None = field(
        alias="secretRef", doc="A Secret here whose token key is the hub token."
    )


class ModelArtifactPersistentVolumeClaimSource(Schema):
    claim_name: str = field(alias="claimName", required=True, min_length=1, max_length=253)
    path: str | None = field(
        max_length=1024, pattern=RELATIVE_PATH, doc="Relative to the volume root; no '..'."
    )


class ModelArtifactImageSource(Schema):
    reference: str = field(
        required=True, max_length=512, doc="An OCI image reference pinned by digest (@sha256:...)."
    )


class ModelArtifactSource(Schema):
    """Exactly one member (the webhook refuses none and several)."""

    hugging_face: ModelArtifactHubSource | None = field(alias="huggingFace")
    model_scope: ModelArtifactHubSource | None = field(alias="modelScope")
    persistent_volume_claim: ModelArtifactPersistentVolumeClaimSource | None = field(
        alias="persistentVolumeClaim"
    )
    image: ModelArtifactImageSource | None = None


class ModelArtifactSpec(Schema):
    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self == oldSelf",
            "spec is immutable: an artifact is an identity; create another ModelArtifact "
            "for another source, revision, file selection or anchor",
        ),
    )

    source: ModelArtifactSource = field(required=True)
    allow_patterns: list[Pattern] | None = field(alias="allowPatterns", list_type="atomic", max_length=32)
    ignore_patterns: list[Pattern] | None = field(alias="ignorePatterns", list_type="atomic", max_length=32)
    expected_digest: str | None = field(alias="expectedDigest", max_length=71, pattern=DIGEST)


class ModelArtifactNodes(Schema):
    """How many nodes hold the content, by state."""

    ready: Int32 = field(required=True, ge=0)
    downloading: Int32 = field(required=True, ge=0)
    failed: Int32 = field(required=True, ge=0)
    downloading_percent: Int32 | None = field(alias="downloadingPercent", pointer=True, ge=0, le=100)


class ModelArtifactResolved(Schema):
    """The identity the source resolved to; written once."""

    revision: str | None = None
    manifest_digest: str | None = field(alias="manifestDigest")
    digest_source: Literal["Hub", "Expected"] | None = field(alias="digestSource")
    file_count: Int64 | None = field(alias="fileCount")
    size_bytes: Int64 | None = field(alias="sizeBytes")
    resolved_time: Time = field(alias="resolvedTime", required=True)
    last_validated_time: Time | None = field(alias="lastValidatedTime")


class ModelArtifactStatus(Schema):
    observed_generation: Int64 | None = field(alias="observedGeneration")
    resolved: ModelArtifactResolved | None = None
    nodes: ModelArtifactNodes | None = None
    conditions: list[Condition] | None = conditions_field()


class ModelArtifact(Resource):
    """A namespaced model source and its resolved, immutable weight identity."""

    __crd__: ClassVar[CRD] = CRD(
        kind="ModelArtifact",
        plural="modelartifacts",
        scope="Namespaced",
        short_names=("mart",),
        columns=(
            PrinterColumn("Revision", ".status.resolved.revision"),
            PrinterColumn("Size", ".status.resolved.sizeBytes", "integer"),
            PrinterColumn("Resolved", ".status.conditions[?(@.type=='Resolved')].status"),
            PrinterColumn("Ready", ".status.nodes.ready", "integer"),
            AGE,
        ),
    )

    spec: ModelArtifactSpec = field(required=True)
    status: ModelArtifactStatus | None = None
