"""fastpath.podresources reads the kubelet's List answer from its wire bytes: it must agree with
protobuf's own decoding on every answer (compiled and interpreted), skip fields it does not know,
and refuse malformed bytes with ValueError."""

from __future__ import annotations

import random

import pytest

from fastpath import podresources
from fastpath.pure import is_compiled, load
from nodeplugins.devicemanager.kubelet import podresources_pb

READERS = [podresources, load("podresources")]
RESOURCE = "nvidia.com/gpu.sliced"


def reference(answer, resource: str, skip) -> set:
    """What walking the decoded messages gives (the reader's specification)."""
    out = set()
    for pod in answer.pod_resources:
        if skip and (pod.namespace, pod.name) in skip:
            continue
        for container in pod.containers:
            if not any(d.resource_name == resource and d.device_ids for d in container.devices):
                out.add((pod.namespace, pod.name, container.name))
    return out


def random_answer(rng: random.Random):
    answer = podresources_pb.ListPodResourcesResponse()
    for p in range(rng.randrange(0, 30)):
        pod = answer.pod_resources.add(name=f"pod-{p}-ü", namespace=rng.choice(["a", "team-b", ""]))
        for c in range(rng.randrange(0, 4)):
            container = pod.containers.add(name=rng.choice(["main", f"c{c}", ""]))
            container.cpu_ids.extend(rng.sample(range(64), rng.randrange(0, 3)))
            if rng.random() < 0.3:
                container.memory.add(memory_type="memory", size=rng.randrange(1 << 40))
            for _ in range(rng.randrange(0, 3)):
                devices = container.devices.add(
                    resource_name=rng.choice([RESOURCE, "nvidia.com/gpu", "example.com/nic"]),
                    device_ids=[f"g:card-{i}:{i}" for i in range(rng.randrange(0, 3))],
                )
                if rng.random() < 0.5:
                    devices.topology.nodes.add(ID=rng.randrange(4))
    return answer


@pytest.mark.parametrize("reader", READERS, ids=["compiled", "interpreted"])
def test_the_wire_reader_agrees_with_protobuf_on_random_answers(reader) -> None:
    rng = random.Random(12)
    for _ in range(300):
        answer = random_answer(rng)
        pods = [(p.namespace, p.name) for p in answer.pod_resources]
        skip = frozenset(rng.sample(pods, len(pods) // 2))
        raw = answer.SerializeToString()
        for resource in (RESOURCE, "nvidia.com/gpu"):
            assert reader.waiting(raw, resource, skip) == reference(answer, resource, skip)
            assert reader.waiting(raw, resource) == reference(answer, resource, frozenset())


def test_the_compiled_reader_is_compiled() -> None:
    assert is_compiled(READERS[0]) and not is_compiled(READERS[1])


@pytest.mark.parametrize("reader", READERS, ids=["compiled", "interpreted"])
def test_fields_it_does_not_know_are_skipped(reader) -> None:
    answer = podresources_pb.ListPodResourcesResponse()
    answer.pod_resources.add(name="p", namespace="a").containers.add(name="main")
    raw = answer.SerializeToString()
    # A newer kubelet's fields of every wire type: a varint, fixed 64/32-bit and a string, at the
    # top level and inside the Pod (field numbers this schema does not use).
    extra = bytes([0x78, 0x96, 0x01]) + bytes([0x81, 0x01]) + b"\0" * 8 + bytes([0x8D, 0x01]) + b"\0" * 4
    pod = raw[2:]  # the one Pod's bytes (tag 0x0a, one length byte)
    grown = bytes([0x0A, len(pod) + len(extra)]) + pod + extra
    assert reader.waiting(extra + grown + bytes([0x92, 0x01, 0x01, 0x41]), "r") == {("a", "p", "main")}


@pytest.mark.parametrize("reader", READERS, ids=["compiled", "interpreted"])
@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a",  # a length that is missing
        b"\x0a\x05abc",  # a Pod longer than the answer
        b"\x0a\x03\x0a\x09p",  # a name longer than its Pod
        b"\x0b",  # wire type 3 (a group), which protobuf 3 never writes
        b"\x08" + b"\xff" * 11,  # a varint of 11 bytes
        b"\x0a\x02\x0a\x01",  # truncated inside the Pod
        b"\x0a\x04\x0a\x02\xff\xfe",  # a name that is not UTF-8
    ],
)
def test_malformed_bytes_are_a_value_error(reader, raw: bytes) -> None:
    with pytest.raises(ValueError):
        reader.waiting(raw, RESOURCE)
