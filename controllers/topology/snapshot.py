"""The snapshot a configMap or webhook source reads, purely (topology spec B.3).

```yaml
apiVersion: topology.gpustack.ai/v1alpha1
revision: inventory-42          # opaque, non-empty
nodes:
  worker-a: {topology.gpustack.ai/zone: zone-a, topology.gpustack.ai/rack: rack-01}
```

:func:`parse` reads the document (JSON or YAML, at most 1 MiB); :func:`judge` decides it whole:
either every described node's writable labels, or the faults that reject it — an unknown or
unselected node, an undeclared level, a key the source may not write, an invalid value, a broken
parent chain, one child value under two parent tuples, a standard parent that does not match the
Node.  Nothing partial is ever returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson
import yaml

from api import topology as topo
from api.selectors import is_label_value
from controllers.topology.hierarchy import Fault, faults


class SnapshotError(ValueError):
    """The document is not a snapshot (the message says what is wrong with it)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    revision: str
    nodes: dict[str, dict[str, str]]


@dataclass(slots=True)
class Verdict:
    """A whole snapshot judged: ``labels`` per described node (writable keys only), or ``faults``."""

    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.faults


def parse(raw: bytes | str) -> Snapshot:
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > topo.MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"the snapshot is {len(data)} bytes; at most {topo.MAX_SNAPSHOT_BYTES} are read")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            doc = yaml.safe_load(data)
        except yaml.YAMLError as error:
            raise SnapshotError(f"the snapshot is neither JSON nor YAML: {str(error)[:200]}") from None
    if not isinstance(doc, dict):
        raise SnapshotError("the snapshot must be a mapping with apiVersion, revision and nodes")
    if doc.get("apiVersion") != topo.SNAPSHOT_API_VERSION:
        raise SnapshotError(f"apiVersion must be {topo.SNAPSHOT_API_VERSION}, not {doc.get('apiVersion')!r}")
    revision = doc.get("revision")
    if not isinstance(revision, str) or not revision.strip():
        raise SnapshotError("revision must be a non-empty string naming this snapshot")
    nodes = doc.get("nodes")
    if nodes is None:
        nodes = {}
    if not isinstance(nodes, dict):
        raise SnapshotError("nodes must map each node name to its level labels")
    out: dict[str, dict[str, str]] = {}
    for name, labels in nodes.items():
        if not isinstance(name, str):
            raise SnapshotError(f"node name {name!r} must be a string")
        if labels is None:
            labels = {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise SnapshotError(f"nodes.{name} must map label keys to string values")
        out[name] = dict(labels)
    return Snapshot(revision.strip(), out)


def judge(
    snapshot: Snapshot,
    levels: list[str],
    additional_prefix: str,
    selected: Mapping[str, Mapping[str, str]],
    known: set[str],
) -> Verdict:
    """The snapshot against the source: ``selected`` maps each node the source selects to its
    current labels, ``known`` holds every node name the cluster has."""
    verdict = Verdict()
    declared = set(levels)
    effective: dict[str, dict[str, str]] = {}
    for name in sorted(snapshot.nodes):
        entry = snapshot.nodes[name]
        if name not in known:
            verdict.faults.append(Fault(name, "", "no such Node; remove it from the snapshot"))
            continue
        if name not in selected:
            verdict.faults.append(
                Fault(name, "", "the Node is not selected by spec.nodeSelector; select it or remove it")
            )
            continue
        node_labels = selected[name]
        chain: dict[str, str] = {}
        for key in topo.STANDARD_PARENTS:  # read-only parents the Node already carries
            if key in declared and key in node_labels:
                chain[key] = node_labels[key]
        writes: dict[str, str] = {}
        for key in sorted(entry):
            value = entry[key]
            if key not in declared:
                verdict.faults.append(Fault(name, key, "is not one of spec.levels; declare it or remove it"))
            elif key in topo.STANDARD_PARENTS:
                if node_labels.get(key) != value:
                    verdict.faults.append(
                        Fault(
                            name,
                            key,
                            f"is a read-only parent: the snapshot says {value!r} but the Node has "
                            f"{node_labels.get(key)!r}; it is never written, so make them agree",
                        )
                    )
            elif not topo.writable(key, additional_prefix):
                verdict.faults.append(
                    Fault(
                        name,
                        key,
                        "is not writable by a snapshot: publish topology.gpustack.ai/* (not the profile) "
                        "or keys under spec.additionalWritePrefix",
                    )
                )
            elif not value or not is_label_value(value):
                verdict.faults.append(
                    Fault(
                        name, key, f"value {value!r} is not a label value (1-63 alphanumerics, '-', '_', '.')"
                    )
                )
            else:
                writes[key] = value
                chain[key] = value
        effective[name] = chain
        verdict.labels[name] = writes
    verdict.faults += faults(levels, effective)
    if verdict.faults:
        verdict.labels = {}
    verdict.faults.sort()
    return verdict


def describe(found: list[Fault], limit: int = 8) -> str:
    """The faults in one message (the first ``limit``, then how many more)."""
    shown = "; ".join(str(f) for f in found[:limit])
    more = len(found) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
