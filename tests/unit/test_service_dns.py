"""The container nodes' cluster DNS stand-in (tests/cluster/service_dns.py) and the store image's
programs (images/build.py): what the e2e module cannot show on its own."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from pathlib import Path

from controllers.kvcache import backend_render
from images import build

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import container_node  # noqa: E402
import service_dns  # noqa: E402


def query(name: str, qtype: int = 1, ident: int = 7) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)


def records(reply: bytes, asked: bytes) -> tuple[int, list[str]]:
    """(rcode, A addresses) of a reply to ``asked``."""
    rcode = struct.unpack("!H", reply[2:4])[0] & 0xF
    count, at, found = struct.unpack("!H", reply[6:8])[0], len(asked), []
    for _ in range(count):
        pointer, kind, _cls, _ttl, size = struct.unpack("!HHHIH", reply[at : at + 12])
        assert pointer == 0xC00C
        if kind == 1:
            found.append(socket.inet_ntoa(reply[at + 12 : at + 12 + size]))
        at += 12 + size
    return rcode, found


def test_a_query_is_answered_with_its_id_its_question_and_one_record_per_address() -> None:
    asked = query("mc-leader.gpustack-system.svc.cluster.local", ident=0x4B1D)
    ident, _flags, name, qtype, end = service_dns.parse_query(asked)
    assert (ident, name, qtype, end) == (0x4B1D, "mc-leader.gpustack-system.svc.cluster.local", 1, len(asked))
    reply = service_dns.answer(asked, ["10.244.50.7", "10.244.50.8"])
    assert reply[:2] == asked[:2] and reply[12 : len(asked)] == asked[12:]
    assert records(reply, asked) == (0, ["10.244.50.7", "10.244.50.8"])


def test_an_unknown_name_is_nxdomain_and_another_type_of_a_known_name_has_no_record() -> None:
    asked = query("nothing.example")
    assert records(service_dns.answer(asked, None), asked) == (3, [])
    aaaa = query("mc-leader.gpustack-system.svc", qtype=28)
    assert records(service_dns.answer(aaaa, ["10.244.50.7"]), aaaa) == (0, [])


def test_only_service_names_are_cluster_names_not_the_search_expansions() -> None:
    assert service_dns.service_of("mc-leader.gpustack-system.svc") == ("gpustack-system", "mc-leader")
    assert service_dns.service_of("mc-leader.gpustack-system.svc.cluster.local.") == (
        "gpustack-system",
        "mc-leader",
    )
    # ndots:5 makes a resolver try the search list first: those must not match.
    assert service_dns.service_of("mc-leader.gpustack-system.svc.team-a.svc.cluster.local") is None
    assert service_dns.service_of("huggingface.co") is None


def slice_of(*endpoints: tuple[str, bool]) -> dict:
    return {
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints],
    }


def test_a_service_resolves_to_its_ready_endpoints_or_while_none_is_ready_to_the_others() -> None:
    service = {"spec": {"selector": {"app": "x"}, "clusterIP": "10.96.0.42"}}
    both = [slice_of(("10.244.1.2", True), ("10.244.1.3", False))]
    assert service_dns.addresses_of(service, both) == ["10.244.1.2"]  # never the unrouted ClusterIP
    assert service_dns.addresses_of(service, [slice_of(("10.244.1.3", False))]) == ["10.244.1.3"]
    assert service_dns.addresses_of(service, []) == []
    # A Service without a selector (the apiserver's own): its ClusterIP, which each node relays.
    assert service_dns.addresses_of({"spec": {"clusterIP": "10.96.0.1"}}, []) == ["10.96.0.1"]


class Reader:
    def __init__(self, answers: dict[str, subprocess.CompletedProcess]) -> None:
        self.answers, self.asked = answers, []

    def get(self, args: tuple[str, ...], timeout: float = 60) -> subprocess.CompletedProcess:
        self.asked.append(args[1])
        return self.answers[args[1]]


def test_the_resolver_reads_the_service_then_its_slices_and_says_nxdomain_only_when_it_is_not_there() -> None:
    import json

    found = subprocess.CompletedProcess([], 0, json.dumps({"spec": {"selector": {"a": "b"}}}), "")
    slices = subprocess.CompletedProcess([], 0, json.dumps({"items": [slice_of(("10.244.9.9", True))]}), "")
    reader = Reader({"service": found, "endpointslices": slices})
    resolver = service_dns.Resolver(reader)
    assert resolver.resolve("mc-leader.ns.svc.cluster.local") == ["10.244.9.9"]
    assert resolver.resolve("other.example") is None and reader.asked == ["service", "endpointslices"]
    gone = subprocess.CompletedProcess([], 1, "", "Error from server (NotFound): services missing")
    assert service_dns.Resolver(Reader({"service": gone})).resolve("missing.ns.svc") is None
    failing = subprocess.CompletedProcess([], 1, "", "Unable to connect to the server: refused")
    try:
        service_dns.Resolver(Reader({"service": failing})).resolve("x.ns.svc")
    except RuntimeError as error:
        assert "refused" in str(error)
    else:
        raise AssertionError("an apiserver failure must not become NXDOMAIN")


def test_a_container_node_asks_the_dns_on_its_own_veth() -> None:
    overrides = container_node.kubelet_overrides(12)
    assert overrides["clusterDNS"] == [container_node.addresses(12)["host"]]
    assert overrides["clusterDomain"] == "cluster.local"
    argv = container_node.dns_argv("python3", Path("/n"), 12, Path("/s"), "https://127.0.0.1:6443")
    assert argv[argv.index("--listen") + 1] == "172.31.12.1" and "/n" in argv


def test_the_store_image_puts_the_rendered_programs_on_its_path() -> None:
    image = build.IMAGES["mooncake"]
    programs = build._mooncake_programs()
    for command in (backend_render.LEADER_COMMAND, backend_render.MEMBER_COMMAND):
        text = programs[f"usr/local/bin/{command}"]
        assert text.startswith("#!/bin/sh\n") and "exec /usr/bin/tini -s -- " in text, text
    # The leader's master runs behind the stand-in of its Lease backend, which execs the wheel's.
    leader = programs[f"usr/local/bin/{backend_render.LEADER_COMMAND}"]
    assert f'-m standin.lease_master {build.MOONCAKE_SITE}/mooncake/mooncake_master "$@"' in leader, leader
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in image.config["env"]
    assert f"PYTHONPATH={build.MOONCAKE_SITE}" in image.config["env"]
    assert {"tini", "libibverbs1", "python3"} <= set(image.debian)
    assert image.ref.endswith(f":{build.mooncake_version()}-cpu")
