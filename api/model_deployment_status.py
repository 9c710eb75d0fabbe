"""A ModelDeployment's status vocabulary: phases, condition types, reasons and event reasons
(model-deployment.md §9.5, §10), named once for the controller, its features and the tests."""

from __future__ import annotations

# --- Phases --------------------------------------------------------------------------------------
PHASE_STARTING = "Starting"
PHASE_READY = "Ready"
PHASE_DEGRADED = "Degraded"
PHASE_DELETING = "Deleting"

# --- Condition types -----------------------------------------------------------------------------
CONDITION_READY = "Ready"  # the phase as a condition, for `kubectl wait --for=condition=Ready`
CONDITION_DOMAIN_REGISTERED = "DomainRegistered"
CONDITION_QUOTA_RESERVED = "QuotaReserved"
CONDITION_CACHE_ATTACHED = "CacheAttached"
CONDITION_REPLICAS_UP_TO_DATE = "ReplicasUpToDate"
CONDITION_ROLE_KINDS_READY = "RoleKindsReady"
CONDITION_KV_EVENTS_PUBLISHING = "KVEventsPublishing"
CONDITION_ROUTER_READY = "RouterReady"
CONDITION_WEIGHTS_READY = "WeightsReady"

# --- Reasons -------------------------------------------------------------------------------------
REASON_NOT_APPLICABLE = "NotApplicable"
# DomainRegistered
REASON_REGISTERED = "Registered"
REASON_BINDING_NOT_FOUND = "BindingNotFound"
REASON_BINDING_NOT_READY = "BindingNotReady"
REASON_BINDING_DELETING = "BindingDeleting"
# QuotaReserved
REASON_RESERVED = "Reserved"
REASON_PENDING = "Pending"
REASON_POD_GROUP_INCOMPLETE = "PodGroupIncomplete"
REASON_PREEMPTED_IN_PART = "PreemptedInPart"
REASON_PARKED = "Parked"
REASON_NO_QUEUE_IN_RESERVED_NAMESPACE = "NoQueueInReservedNamespace"
REASON_ADMISSION_IN_FLIGHT = "AdmissionInFlight"
REASON_NO_REPLICAS = "NoReplicas"
REASON_ALL_REPLICAS_TERMINATING = "AllReplicasTerminating"
# CacheAttached
REASON_CACHE_ACTIVE = "CacheActive"
REASON_CACHE_OPERATIONS_FAILING = "CacheOperationsFailing"
REASON_UNMANAGED = "Unmanaged"
REASON_NO_REPLICA_READY = "NoReplicaReady"
REASON_NO_OBSERVATION_AVAILABLE = "NoObservationAvailable"
# ReplicasUpToDate
REASON_UP_TO_DATE = "UpToDate"
REASON_ROLLOUT_IN_PROGRESS = "RolloutInProgress"
REASON_REPLACEMENT_IN_PROGRESS = "ReplacementInProgress"
REASON_ROLLOUT_HELD_BY_CACHE = "RolloutHeldByCache"
REASON_ROLLOUT_HELD_BY_WEIGHTS = "RolloutHeldByWeights"
REASON_ROLLOUT_NOT_OBSERVED = "RolloutNotObserved"
# RoleKindsReady
REASON_ALL_KINDS_READY = "AllKindsReady"
REASON_KINDS_NOT_READY = "KindsNotReady"
REASON_NO_ROLE_STATUSES = "NoRoleStatuses"
# KVEventsPublishing
REASON_PUBLISHING = "Publishing"
REASON_PUBLISHER_DISABLED = "PublisherDisabled"
REASON_NO_ROUTER = "NoRouter"
REASON_ROLE_UNMANAGED = "RoleUnmanaged"
# RouterReady
REASON_READY = "Ready"
REASON_RENDER_FAILED = "RenderFailed"
REASON_NO_READY_REPLICAS = "NoReadyReplicas"
REASON_NOT_DEPLOYED = "NotDeployed"

# --- Events --------------------------------------------------------------------------------------
EVENT_REPLICA_EVICTED = "ReplicaEvicted"
EVENT_REPLICA_LEAVING = "ReplicaLeaving"
EVENT_REPLICA_RESTARTED = "ReplicaRestarted"
EVENT_RUNTIME_VERSION_SKEW = "RuntimeVersionSkew"
EVENT_RENDER_FAILED = "RenderFailed"
KV_LEASE_WINDOW = "30s"
"""The ``kv_lease_duration`` window a departing replica's siblings lose its blocks within."""
