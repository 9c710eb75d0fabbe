"""Whether labels form a hierarchy, purely (topology spec B.3, B.4 step 2).

A node's **ordered keys** are the longest prefix of the (normalised) levels it populates, then
``kubernetes.io/hostname``; a populated level whose parent is missing makes the node invalid.
Across nodes, one value of a level sits under exactly one tuple of parent values: rack ``r1``
cannot be in zone ``a`` on one node and zone ``b`` on another.  Every fault names the node and
the key, so a refusal says what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from api import constants
from api.naming import topology_profile
from api.topology import normalized_levels

HOSTNAME_KEYS = (constants.LABEL_HOSTNAME,)
HOSTNAME_PROFILE = topology_profile(HOSTNAME_KEYS)


@dataclass(frozen=True, slots=True, order=True)
class Fault:
    """One reason labels do not form the hierarchy: on ``node``, at ``key``."""

    node: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"node {self.node}, {self.key}: {self.message}"


def populated_prefix(levels: Sequence[str], labels: Mapping[str, str]) -> tuple[list[str], Fault | None]:
    """The longest prefix of ``levels`` present in ``labels``, and the fault when a finer level is
    present below a missing one (the node's name is filled in by the caller)."""
    prefix: list[str] = []
    missing = ""
    for key in levels:
        if key in labels:
            if missing:
                return prefix, Fault(
                    "", key, f"is set but its parent level {missing} is not; label the parent or remove it"
                )
            prefix.append(key)
        elif not missing:
            missing = key
    return prefix, None


def ordered_keys(levels: Sequence[str], labels: Mapping[str, str]) -> tuple[list[str], Fault | None]:
    """A node's ordered keys (B.4 step 2): the populated prefix of the normalised levels, then the
    hostname; on a fault, the hostname alone with the fault."""
    prefix, fault = populated_prefix(normalized_levels(list(levels)), labels)
    if fault is not None:
        return list(HOSTNAME_KEYS), fault
    return [*prefix, constants.LABEL_HOSTNAME], None


def profile_of(keys: Sequence[str]) -> str:
    return topology_profile(keys)


def faults(levels: Sequence[str], nodes: Mapping[str, Mapping[str, str]]) -> list[Fault]:
    """Every fault of ``nodes`` (name → the labels at the levels) against ``levels``: a child
    without its parent, and one child value under two parent tuples."""
    ordered = normalized_levels(list(levels))
    out: list[Fault] = []
    parents: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}  # (key, value) → (parents, first node)
    for name in sorted(nodes):
        labels = nodes[name]
        prefix, fault = populated_prefix(ordered, labels)
        if fault is not None:
            out.append(Fault(name, fault.key, fault.message))
            continue
        for depth, key in enumerate(prefix):
            if depth == 0:
                continue
            above = tuple(labels[k] for k in prefix[:depth])
            seen = parents.setdefault((key, labels[key]), (above, name))
            if seen[0] != above:
                there = ", ".join(f"{k}={v}" for k, v in zip(prefix[:depth], seen[0], strict=True))
                here = ", ".join(f"{k}={v}" for k, v in zip(prefix[:depth], above, strict=True))
                out.append(
                    Fault(
                        name,
                        key,
                        f"value {labels[key]!r} is under {here} here but under {there} on node {seen[1]}; "
                        "one child value belongs to one parent",
                    )
                )
    return out
