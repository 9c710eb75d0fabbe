"""ModelDeployment object rules: what the submitted object alone decides (model-deployment.md §5).

Each function covers a numbered row of the refusal table and returns field errors; the handler in
``webhooks.modeldeployment.handlers`` calls them in the table's order and aggregates one 422.  The rules
read :class:`~readmodels.modeldeployment.Deployment`, never the raw object, so a role's argv is
parsed once whichever rule asks first.
"""

from __future__ import annotations

import re

from api import constants, engines, setting_names
from api.fielderrors import FieldError, duplicate, forbidden, invalid, required, too_many
from api.naming import is_qualified_name
from fastpath.degrees import width
from readmodels.modeldeployment import (
    ENGINE_KINDS,
    KINDS,
    MAX_ROLES,
    ROUTER_ENGINES,
    SERVER,
    Deployment,
    Role,
    as_dict,
    as_list,
    as_str,
    exact,
    whole,
)
from webhooks.lookups import Lookups

SETTING_PRIVILEGED = setting_names.MODEL_DEPLOYMENT_PRIVILEGED_ALLOWED
SETTING_HOST_PATH = setting_names.MODEL_DEPLOYMENT_HOST_PATH_VOLUME_ALLOWED

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


# --- Names and kinds (#1, #3, #6–#13) --------------------------------------------------------------


def role_count(md: Deployment) -> list[FieldError]:
    """#1: at most 10 roles."""
    if len(md.roles) <= MAX_ROLES:
        return []
    error = too_many("spec.roles", len(md.roles), MAX_ROLES)
    detail = (
        f"; {MAX_ROLES} is this operator's own shape limit (every role renders its own replicas, "
        "Services and queue references), not an upstream one: split the roles over several deployments"
    )
    return [FieldError(error.path, error.reason, error.message + detail)]


def duplicate_names(md: Deployment) -> list[FieldError]:
    """#3 (schema backstop): role names are unique."""
    errors: list[FieldError] = []
    first: dict[str, int] = {}
    for role in md.roles:
        if role.name in first:
            errors.append(
                duplicate(
                    f"{role.path}.name",
                    role.name,
                    f"spec.roles[{first[role.name]}] already has this name; a role name is the Kueue "
                    "PodSet name and keys every replica's pod group, so two roles of one name would "
                    "collide on the same ordinals' groups; rename one",
                )
            )
        else:
            first[role.name] = role.index
    return errors


def _label_problem(name: str, *, dns1035: bool = False) -> str | None:
    if len(name) > 63:
        return f"is {len(name)} characters, over the 63 a DNS label allows"
    if "." in name:
        return "contains a dot (from a subdomain-shaped deployment name)"
    if dns1035 and name[:1].isdigit():
        return "starts with a digit, which a DNS-1035 label may not"
    if not (_DNS1035_LABEL if dns1035 else _DNS1123_LABEL).match(name):
        return "is not a DNS label (lowercase letters, digits and '-', starting and ending alphanumeric)"
    return None


def member_names(md: Deployment) -> list[FieldError]:
    """#6: above size 1 every member is named ``<md>-<role>-r<k>-m<j>``, a hostname."""
    errors: list[FieldError] = []
    if not md.name:
        return errors
    for role in md.roles:
        if role.size <= 1 or not role.name:
            continue
        longest = f"{md.name}-{role.name}-r{max(role.replicas, 1) - 1}-m{role.size - 1}"
        problem = _label_problem(longest)
        if problem:
            errors.append(
                invalid(
                    role.path,
                    longest,
                    f"the longest Pod name this role derives (<deployment>-<role>-r<replica>-m<member>, "
                    f"{len(longest)} characters) {problem}; each member's name is its hostname, so it "
                    "must be a DNS-1123 label: shorten the role name or the deployment name, or "
                    "declare fewer replicas",
                )
            )
    return errors


def service_names(md: Deployment, old: Deployment | None) -> list[FieldError]:
    """#7 (new role names only): ``<md>-<role>`` is a DNS-1035 label; #8 (every request): the
    Services a deployment derives are named differently."""
    errors: list[FieldError] = []
    if not md.name:
        return errors
    for role in md.roles:
        if not role.name or (old is not None and role.name in old.by_name):
            continue
        service = f"{md.name}-{role.name}"
        problem = _label_problem(service, dns1035=True)
        if problem:
            errors.append(
                invalid(
                    f"{role.path}.name",
                    role.name,
                    f"the role's Service would be named {service!r} ({len(service)} characters), which "
                    f"{problem}; a Service name "
                    "must be a DNS-1035 label: shorten or rename the role or the deployment",
                )
            )
    claimed: dict[str, str] = {md.name: "the deployment's Service"}
    if md.router is not None:
        claimed[f"{md.name}-router"] = "the router's Service (spec.router)"
    for role in md.roles:
        if not role.name or md.by_name.get(role.name) is not role:
            continue  # a duplicate name is #3's to report
        names = [(f"{md.name}-{role.name}", f"the Service of role {role.name!r} ({role.path})")]
        if role.size > 1:
            names += [
                (f"{md.name}-{role.name}-r{k}", f"instance {k}'s headless Service of role {role.name!r}")
                for k in range(max(role.replicas, 0))
            ]
        collision = None
        for name, claimant in names:
            holder = claimed.get(name)
            if holder is not None and collision is None:
                collision = (name, holder, claimant)
            claimed.setdefault(name, claimant)
        if collision:
            name, holder, claimant = collision
            errors.append(
                invalid(
                    f"{role.path}.name",
                    role.name,
                    f"{claimant} and {holder} would both be named {name!r}; rename the role",
                )
            )
    return errors


def kinds(md: Deployment) -> list[FieldError]:
    """#9 Server beside another kind, #10 a non-Server kind twice, #11 a kind the engine cannot render."""
    errors: list[FieldError] = []
    declared = {role.kind for role in md.roles}
    others = sorted(declared - {SERVER})
    first: dict[str, Role] = {}
    for role in md.roles:
        path = f"{role.path}.kind"
        if role.kind == SERVER and others:
            errors.append(
                forbidden(
                    path,
                    f"a Server serves whole requests alone, so it describes no arrangement beside "
                    f"{' and '.join(others)} roles; put the server in another deployment, or declare "
                    "the Prefill/Decode pair alone",
                )
            )
        elif role.kind != SERVER:
            if role.kind in first:
                errors.append(
                    duplicate(
                        path,
                        role.kind,
                        f"the first {role.kind} role is {first[role.kind].path} "
                        f"({first[role.kind].name!r}); only Server repeats: nothing downstream can "
                        f"reach a second {role.kind} role",
                    )
                )
            else:
                first[role.kind] = role
        rendered = ENGINE_KINDS.get(md.engine)
        if rendered is not None and role.kind in KINDS and role.kind not in rendered:
            errors.append(
                invalid(
                    path,
                    role.kind,
                    f"{md.engine} has no rendering term for kind {role.kind}; it renders "
                    f"{', '.join(sorted(rendered))}",
                )
            )
    return errors


def engine_version(md: Deployment) -> list[FieldError]:
    """#12: a role without an image has one synthesized from ``engine.version``."""
    version = md.engine_block.get("version")
    if (isinstance(version, str) and version) or md.engine_block.get("image"):
        return []
    lacking = [role for role in md.roles if not role.image]
    if not lacking:
        return []
    role = lacking[0]
    more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
    return [
        required(
            "spec.engine.version",
            f"role {role.name!r} ({role.path}){more} names no image, so its image is synthesized "
            "from the engine version (gpustack/runner:<backend><runtimeVersion>-<engine><version>); "
            "set spec.engine.version, or an image on every role",
        )
    ]


def pool_ref(md: Deployment) -> list[FieldError]:
    """#13: ``kvCache.poolRef.name`` names a Binding."""
    if md.kv_cache is None or md.binding_name:
        return []
    return [
        invalid(
            "spec.kvCache.poolRef.name",
            "",
            "name a KVCachePoolBinding in this namespace: the Binding is the authorization point an "
            "administrator creates to grant this namespace a pool, and an empty reference names none",
        )
    ]


# --- The argv stream (#17, #18) ------------------------------------------------------------------


def degrees(md: Deployment) -> list[FieldError]:
    """#17 an unreadable degree on the stream; #18 a declared width over the card request."""
    if md.engine not in engines.ENGINES:
        return []
    errors: list[FieldError] = []
    for role in md.roles:
        parsed = role.degrees
        for flag, message in parsed.errors:
            way = (
                f"fix it in {role.path}.command"
                if not role.managed
                else f"or own the whole command line with {role.path}.command"
            )
            errors.append(
                invalid(
                    role.path,
                    flag,
                    f"role {role.name!r} declares a parallel degree the operator cannot read on "
                    f"{role.path}.{role.stream_field}: {message}; degrees are read to validate the role "
                    f"and render its transfer leg: write the value as an integer of at least 1, {way}",
                )
            )
        if not parsed.ok or parsed.wiring:
            continue
        cards = whole(role.accelerator)
        if cards is None or cards <= 0:
            continue
        needed, factors = width(md.engine, parsed)
        if needed is not None and needed <= cards:
            continue
        shown = " × ".join(f"{flag}={value}" for flag, value in factors) or "the declared degrees"
        amount = f"more than {cards}" if needed is None else str(needed)
        errors.append(
            invalid(
                f"{role.path}.resources.accelerator",
                role.accelerator,
                f"role {role.name!r} requests {cards} accelerator(s) per Pod, but its degrees "
                f"({shown}) need {amount} on each member; the width is per member, so "
                f"{role.path}.size does not rescue it: request {amount} accelerators per Pod, or lower "
                "the degrees",
            )
        )
    return errors


# --- Role fields (#24, #27–#29) -----------------------------------------------------------------------


def volumes(md: Deployment) -> list[FieldError]:
    """#24: one source per volume, distinct mount paths, no ``..`` segment in ``subPath``."""
    errors: list[FieldError] = []
    for role in md.roles:
        mounts: dict[str, int] = {}
        for k, raw in enumerate(role.volumes):
            volume = as_dict(raw)
            path = f"{role.path}.additionalVolumes[{k}]"
            sources = [s for s in ("configMap", "secret", "hostPath") if volume.get(s) is not None]
            if not sources:
                mount = as_str(volume.get("mountPath"))
                errors.append(
                    required(
                        path,
                        f"the volume mounted at {mount or '(no mountPath)'} has no source: give it one of "
                        "configMap, secret or hostPath",
                    )
                )
            elif len(sources) > 1:
                errors.append(forbidden(path, f"a volume takes exactly one source, not {', '.join(sources)}"))
            mount = as_str(volume.get("mountPath"))
            if mount:
                if mount in mounts:
                    errors.append(
                        duplicate(
                            f"{path}.mountPath",
                            mount,
                            f"already mounted by {role.path}.additionalVolumes[{mounts[mount]}]",
                        )
                    )
                else:
                    mounts[mount] = k
            sub = as_str(volume.get("subPath"))
            if ".." in sub.split("/"):
                errors.append(
                    invalid(
                        f"{path}.subPath",
                        sub,
                        "a '..' path segment escapes the volume; name a path inside it",
                    )
                )
    return errors


def topology(md: Deployment) -> list[FieldError]:
    """#27: ``requiredLevel`` is a qualified label key and not the implicit hostname."""
    errors: list[FieldError] = []
    for role in md.roles:
        level = as_dict(role.raw.get("topology")).get("requiredLevel")
        if not isinstance(level, str) or not level:
            continue
        path = f"{role.path}.topology.requiredLevel"
        if level == constants.LABEL_HOSTNAME:
            errors.append(
                invalid(
                    path,
                    level,
                    "kubernetes.io/hostname is implicit in every placement and cannot be required "
                    "explicitly; name a wider level (e.g. topology.kubernetes.io/zone) or leave it empty",
                )
            )
        elif not is_qualified_name(level):
            errors.append(
                invalid(
                    path,
                    level,
                    "must be a qualified label key: an optional DNS-subdomain prefix and '/', then a "
                    "name of at most 63 alphanumerics, '-', '_' or '.' (e.g. topology.kubernetes.io/zone)",
                )
            )
    return errors


def resources(md: Deployment) -> list[FieldError]:
    """#28 a partition profile with a slice percentage; #29 a negative or fractional interface."""
    errors: list[FieldError] = []
    for role in md.roles:
        path = f"{role.path}.resources"
        if role.profile and role.slicing:
            errors.append(
                forbidden(
                    f"{path}.acceleratorPartitionedProfile",
                    "a hardware partition and a logical slice cannot both apply to one accelerator: "
                    "drop acceleratorSlicedMemoryPercentage/acceleratorSlicedCoresPercentage, or "
                    "acceleratorPartitionedProfile",
                )
            )
        value = role.resources.get("interface")
        if value is not None:
            found = exact(value)
            if found is None or found[0] < 0 or found[1] != 1:
                errors.append(
                    invalid(
                        f"{path}.interface",
                        value,
                        "must be a non-negative whole number of fabric interfaces per Pod",
                    )
                )
    return errors


# --- Router (#41–#43) ------------------------------------------------------------------------------


def router(md: Deployment) -> list[FieldError]:
    if md.router is None or not md.router_name:
        return []
    errors: list[FieldError] = []
    name = md.router_name
    for j, token in enumerate(as_list(md.router.get("extraArgs"))):
        flag = engines.router_owned_flag(name, token) if isinstance(token, str) else None
        if flag:
            errors.append(
                forbidden(
                    f"spec.router.extraArgs[{j}]",
                    f"{flag} is owned by the operator on {name}: it renders that flag itself, and one "
                    "setting has one source; remove it",
                )
            )
    if md.router.get("disaggregationThresholdTokens") is not None and name != engines.ROUTER_LLM_D:
        errors.append(
            forbidden(
                "spec.router.disaggregationThresholdTokens",
                f"is meaningful under {engines.ROUTER_LLM_D} only; {name} has no per-request split to "
                "threshold: remove it",
            )
        )
    fronted = ROUTER_ENGINES.get(name)
    if fronted is not None and md.engine in engines.ENGINES and md.engine not in fronted:
        accepted = ", ".join(r for r, e in ROUTER_ENGINES.items() if md.engine in e)
        errors.append(
            invalid(
                "spec.router.name",
                name,
                f"{name} fronts {' and '.join(fronted)} only, not {md.engine}; the routers accepted "
                f"for {md.engine} are: {accepted}",
            )
        )
    return errors


# --- Host access (#25, #26) ------------------------------------------------------------------------


def _host_paths(role: Role | None) -> list[object]:
    if role is None:
        return []
    return [as_dict(v).get("hostPath") for v in role.volumes if as_dict(v).get("hostPath") is not None]


async def host_access(md: Deployment, old: Deployment | None, lookups: Lookups) -> list[FieldError]:
    """#25 privileged and #26 hostPath, each gated by a Setting; what a stored role held survives."""
    errors: list[FieldError] = []
    settings: dict[str, bool] = {}

    async def enabled(name: str) -> bool:
        if name not in settings:
            settings[name] = await lookups.setting_enabled(name)
        return settings[name]

    for role in md.roles:
        stored = old.by_name.get(role.name) if old is not None else None
        held_privilege = stored is not None and stored.privileged
        if role.privileged and not held_privilege and not await enabled(SETTING_PRIVILEGED):
            errors.append(
                forbidden(
                    f"{role.path}.privileged",
                    "privileged roles are off in this cluster: a privileged container escapes its "
                    f"boundary; an administrator enables Setting {SETTING_PRIVILEGED}",
                )
            )
        held = _host_paths(stored)
        for k, raw in enumerate(role.volumes):
            host = as_dict(raw).get("hostPath")
            if host is None or host in held:
                continue
            if not await enabled(SETTING_HOST_PATH):
                errors.append(
                    forbidden(
                        f"{role.path}.additionalVolumes[{k}].hostPath",
                        "host paths are off in this cluster: a hostPath reaches the node's filesystem; "
                        f"an administrator enables Setting {SETTING_HOST_PATH}",
                    )
                )
    return errors
