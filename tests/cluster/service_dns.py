"""A stand-in for cluster DNS on a container node, which these nodes run none of (no CoreDNS, no
kube-proxy): the kubelet's ``clusterDNS`` is the host end of the node's veth (``172.31.<id>.1``),
where this process answers UDP queries for ``<service>.<namespace>.svc[.cluster.local]``.

What it answers, read from the apiserver at each query (a cache of 2 s):

    a Service with a selector   the addresses of its EndpointSlices' ready endpoints (the not-ready
                                ones while none is ready), as a headless Service answers: Pod IPs
                                are routed from every node and from the host, a ClusterIP is not
    a Service without one       its ClusterIP (``kubernetes.default``: 10.96.0.1, where each node
                                relays to the apiserver)
    no such Service             NXDOMAIN; every other name too (nothing outside is reachable)

So a Service is reached by name only on the ports its Pods listen on (a Service whose port differs
from its targetPort is not translated): the managed Mooncake leader's Service maps 50051 and 9003 to
themselves, which is what a member, the worker's admin reads and an engine dial.

    python tests/cluster/service_dns.py --listen 172.31.10.1 --cluster-state .dev/cluster \\
        --node-dir .dev/cluster/nodes/<node>

Stdlib only (and ``restget``), like ``harness``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import restget

CLUSTER_DOMAIN = "cluster.local"
NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?$"
)
TTL = 5
CACHE_S = 2.0
TYPE_A = 1
RCODE_NXDOMAIN = 3
RCODE_FORMERR = 1


def parse_query(packet: bytes) -> tuple[int, int, str, int, int] | None:
    """(id, flags, name, qtype, end of the question) of a one-question query, None if malformed."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        return None
    labels, at = [], 12
    while True:
        if at >= len(packet):
            return None
        size = packet[at]
        at += 1
        if size == 0:
            break
        if size & 0xC0 or at + size > len(packet):
            return None
        labels.append(packet[at : at + size].decode("ascii", "replace"))
        at += size
    if at + 4 > len(packet):
        return None
    qtype, _qclass = struct.unpack("!HH", packet[at : at + 4])
    return ident, flags, ".".join(labels).lower(), qtype, at + 4


def answer(packet: bytes, addresses: list[str] | None) -> bytes:
    """The response to ``packet``: A records of ``addresses`` for an A query (none for another
    type), NXDOMAIN when ``addresses`` is None."""
    parsed = parse_query(packet)
    if parsed is None:
        ident = struct.unpack("!H", packet[:2])[0] if len(packet) >= 2 else 0
        return struct.pack("!HHHHHH", ident, 0x8000 | RCODE_FORMERR, 0, 0, 0, 0)
    ident, flags, _name, qtype, end = parsed
    rcode = RCODE_NXDOMAIN if addresses is None else 0
    records = [a for a in addresses or [] if qtype == TYPE_A]
    # QR, authoritative, the query's RD, recursion available.
    reply_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
    out = struct.pack("!HHHHHH", ident, reply_flags, 1, len(records), 0, 0) + packet[12:end]
    for address in records:
        out += struct.pack("!HHHIH", 0xC00C, TYPE_A, 1, TTL, 4) + ipaddress.IPv4Address(address).packed
    return out


def service_of(name: str) -> tuple[str, str] | None:
    """(namespace, service) of a cluster name, None for any other."""
    found = NAME.match(name.rstrip("."))
    return (found.group(3), found.group(1)) if found else None


def addresses_of(service: dict, slices: list[dict]) -> list[str]:
    """What a name resolves to (see the module docstring)."""
    spec = service.get("spec") or {}
    if not spec.get("selector"):
        ips = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"]
        if ips:
            return [ip for ip in ips if ":" not in ip]
    ready: list[str] = []
    other: list[str] = []
    for found in slices:
        if found.get("addressType") != "IPv4":
            continue
        for endpoint in found.get("endpoints") or []:
            target = ready if (endpoint.get("conditions") or {}).get("ready") else other
            target += endpoint.get("addresses") or []
    return sorted(set(ready or other))


class Resolver:
    def __init__(self, reader: restget.Reader) -> None:
        self.reader = reader
        self.cache: dict[tuple[str, str], tuple[float, list[str] | None]] = {}

    def _get(self, *args: str) -> dict | None:
        """The object or list, None when the apiserver says it is not there; raises on any other
        failure (no answer is sent: the client asks again, rather than caching a wrong NXDOMAIN)."""
        done = self.reader.get(("get", *args, "-o", "json"), timeout=3)
        if done is None:
            raise RuntimeError(f"restget does not take get {' '.join(args)}")
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise RuntimeError(done.stderr.strip())
        return json.loads(done.stdout)

    def resolve(self, name: str) -> list[str] | None:
        key = service_of(name)
        if key is None:
            return None
        cached = self.cache.get(key)
        if cached and time.monotonic() - cached[0] < CACHE_S:
            return cached[1]
        namespace, service = key
        found = self._get("service", service, "-n", namespace)
        result: list[str] | None = None
        if found is not None:
            listed = self._get(
                "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}"
            )
            result = addresses_of(found, (listed or {}).get("items") or [])
        self.cache[key] = (time.monotonic(), result)
        return result


def serve(listen: str, reader: restget.Reader, port: int = 53) -> None:
    resolver = Resolver(reader)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((listen, port))
    print(f"service-dns: answering on {listen}:{port}", flush=True)
    while True:
        packet, peer = sock.recvfrom(4096)
        parsed = parse_query(packet)
        try:
            addresses = resolver.resolve(parsed[2]) if parsed else None
        except Exception as error:  # an apiserver hiccup: no answer, the client asks again
            print(f"service-dns: {parsed[2] if parsed else '?'}: {error}", flush=True)
            continue
        if parsed and service_of(parsed[2]):
            print(f"service-dns: {peer[0]} {parsed[2]} -> {addresses}", flush=True)
        sock.sendto(answer(packet, addresses), peer)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--cluster-state", required=True, type=Path, help="the harness's state dir (pki/)")
    parser.add_argument("--server", required=True)
    parser.add_argument("--node-dir", default="", help="the node this serves (names the process)")
    args = parser.parse_args(argv)
    pki = args.cluster_state / "pki"
    reader = restget.Reader(args.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    serve(args.listen, reader, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
