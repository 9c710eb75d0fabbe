"""Shapes shared by several kinds: references, selectors, conditions, core volume and security types.

They mirror the Kubernetes core and meta types the Go API embeds (``core.LocalObjectReference``,
``meta.LabelSelector``, ``core.SecurityContext`` …) and the project's own ``Condition``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from api.models.base import Int64, LabelValue, Schema, Time, field

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ABSOLUTE_PATH = r"^(/[^/]+)+$"
RELATIVE_PATH = r"^[^/].*$"
PULL_POLICY = Literal["Always", "IfNotPresent", "Never"]
PROTOCOL = Literal["TCP", "UDP", "SCTP"]
CONDITION_TYPE = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
CONDITION_REASON = r"^$|^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class LocalObjectReference(Schema):
    """A reference to an object by name in the referrer's own namespace (``core.LocalObjectReference``)."""

    __k8s_map_type__: ClassVar[str | None] = "atomic"

    name: str | None = field(max_length=253, doc="Name of the referent.")


class LabelSelectorRequirement(Schema):
    """One ``key operator values`` term of a label selector."""

    key: str = field(required=True, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = field(required=True)
    values: list[LabelValue] | None = field(list_type="atomic")


class LabelSelector(Schema):
    """A label query over objects (``meta.LabelSelector``); ``{}`` selects everything."""

    __k8s_map_type__: ClassVar[str | None] = "atomic"

    match_labels: dict[str, str] | None = field(alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = field(
        alias="matchExpressions", list_type="atomic"
    )


class Condition(Schema):
    """One aspect of an object's observed state (the project's ``Condition``, as ``metav1.Condition``)."""

    type: str = field(required=True, max_length=316, pattern=CONDITION_TYPE)
    status: Literal["True", "False", "Unknown"] = field(required=True)
    last_transition_time: Time = field(alias="lastTransitionTime", required=True)
    observed_generation: Int64 | None = field(alias="observedGeneration", ge=0)
    reason: str | None = field(max_length=1024, pattern=CONDITION_REASON)
    message: str | None = field(max_length=32768)


def conditions_field() -> Any:
    """The ``conditions`` list every status carries: a list-map keyed by ``type``."""
    return field(list_type="map", map_keys=("type",))


class EnvVar(Schema):
    """An environment variable: a plain name and value, no ``valueFrom`` (``InstanceEnvVar``)."""

    name: str = field(required=True, max_length=256)
    value: str = field(required=True, always=True)


class HostPathVolumeSource(Schema):
    """A path on the node (``core.HostPathVolumeSource``)."""

    path: str = field(required=True)
    type: (
        Literal[
            "",
            "DirectoryOrCreate",
            "Directory",
            "FileOrCreate",
            "File",
            "Socket",
            "CharDevice",
            "BlockDevice",
        ]
        | None
    ) = field(pointer=True)


class HostIP(Schema):
    """One IP address of a node (``core.HostIP``)."""

    ip: str = field(required=True)


class PodIP(Schema):
    """One IP address of a Pod (``core.PodIP``)."""

    ip: str = field(required=True)


class Capabilities(Schema):
    add: list[str] | None = field(list_type="atomic")
    drop: list[str] | None = field(list_type="atomic")


class SELinuxOptions(Schema):
    user: str | None = None
    role: str | None = None
    type: str | None = None
    level: str | None = None


class WindowsSecurityContextOptions(Schema):
    gmsa_credential_spec_name: str | None = field(alias="gmsaCredentialSpecName", pointer=True)
    gmsa_credential_spec: str | None = field(alias="gmsaCredentialSpec", pointer=True)
    run_as_user_name: str | None = field(alias="runAsUserName", pointer=True)
    host_process: bool | None = field(alias="hostProcess", pointer=True)


class SeccompProfile(Schema):
    type: Literal["Unconfined", "RuntimeDefault", "Localhost"] = field(required=True)
    localhost_profile: str | None = field(alias="localhostProfile", pointer=True)


class AppArmorProfile(Schema):
    type: Literal["Unconfined", "RuntimeDefault", "Localhost"] = field(required=True)
    localhost_profile: str | None = field(alias="localhostProfile", pointer=True)


class SecurityContext(Schema):
    """A container's security context (``core.SecurityContext``)."""

    capabilities: Capabilities | None = None
    privileged: bool | None = field(pointer=True)
    se_linux_options: SELinuxOptions | None = field(alias="seLinuxOptions")
    windows_options: WindowsSecurityContextOptions | None = field(alias="windowsOptions")
    run_as_user: Int64 | None = field(alias="runAsUser", pointer=True)
    run_as_group: Int64 | None = field(alias="runAsGroup", pointer=True)
    run_as_non_root: bool | None = field(alias="runAsNonRoot", pointer=True)
    read_only_root_filesystem: bool | None = field(alias="readOnlyRootFilesystem", pointer=True)
    allow_privilege_escalation: bool | None = field(alias="allowPrivilegeEscalation", pointer=True)
    proc_mount: Literal["Default", "Unmasked"] | None = field(alias="procMount", pointer=True)
    seccomp_profile: SeccompProfile | None = field(alias="seccompProfile")
    app_armor_profile: AppArmorProfile | None = field(alias="appArmorProfile")
