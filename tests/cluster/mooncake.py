"""The real Mooncake store on loopback: a master, store members, and engine-like writers.

Stdlib + subprocess only (like ``harness``), so the e2e fixtures, the store tests and ``make dev``
all import it.  The binaries come from ``scripts/ensure-mooncake.sh`` (the PyPI wheel
``mooncake-transfer-engine-non-cuda`` and Debian's ``libibverbs1``, cached under ~/.cache).

    master = mooncake.Master(state_dir, rpc_port=28410, admin_port=28411)
    master.start()                       # multi-tenant, file policy connector, waits for /health
    member = mooncake.Member(master, state_dir, port=28412, http_port=28413, segment="64MB")
    member.start()                       # a store member mounting a DRAM segment
    mooncake.tenant_write(master, "team-a", ["k0"], size=1 << 20)
    master.stop(); member.stop()

    rest = mooncake.RestMember(state_dir, argv=["--port", "28414"], env={"MOONCAKE_MASTER": ...})
    rest.start()                         # the backend image's member program, as a DaemonSet runs it

Nothing here writes what one of the operator's components is responsible for: the master keeps
its own ledger, the member mounts its own segment; tests only read them back through the admin API.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENSURE = REPO / "scripts" / "ensure-mooncake.sh"
EMPTY_POLICY = "version: 1\ntenants: []\n"
START_TIMEOUT_S = 30.0


class StoreError(RuntimeError):
    pass


def ensure_installed() -> Path:
    """The bin dir holding ``mooncake_master``, ``mooncake_client`` and the store's ``python``."""
    proc = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise StoreError(f"scripts/ensure-mooncake.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def port(name: str, default: int) -> int:
    """A store port from ``GPUSTACK_MOONCAKE_<NAME>_PORT``, else ``default``."""
    return int(os.environ.get(f"GPUSTACK_MOONCAKE_{name}_PORT", str(default)))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class _Process:
    """A process this module started, remembered by pid file so a later run can stop it."""

    state_dir: Path
    name: str
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    def _spawn(self, argv: list[str]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.stop()
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        self.pid_file.write_text(str(self.proc.pid))

    def running(self) -> bool:
        pid = self._pid()
        if pid is None:
            return False
        if self.proc is not None and self.proc.pid == pid:
            return self.proc.poll() is None
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def _pid(self) -> int | None:
        if self.proc is not None:  # started here: never trust a pid file over the handle
            return self.proc.pid if self.proc.poll() is None else None
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        pid = self._pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            self.proc = None
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.pid == pid:
                if self.proc.poll() is not None:
                    break
            else:
                try:
                    os.kill(pid, 0)
                except OSError:
                    break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(timeout=5)
        self.pid_file.unlink(missing_ok=True)
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Master(_Process):
    """``mooncake_master`` on ``host`` (loopback unless told): RPC for clients, one HTTP port for
    admin and metrics."""

    rpc_port: int = 0
    admin_port: int = 0
    multi_tenancy: bool = True
    name: str = "mooncake-master"
    extra_args: tuple[str, ...] = ()
    host: str = "127.0.0.1"

    @property
    def client_address(self) -> str:
        return f"{self.host}:{self.rpc_port}"

    @property
    def admin_address(self) -> str:
        return f"{self.host}:{self.admin_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin_address}"

    @property
    def policy_file(self) -> Path:
        """The tenant quota policy the master loads at start and rewrites on every admin change."""
        return self.state_dir / "tenant_quotas.yaml"

    def argv(self, bin_dir: Path) -> list[str]:
        argv = [
            str(bin_dir / "mooncake_master"),
            f"-rpc_port={self.rpc_port}",
            f"-rpc_address={self.host}",
            f"-metrics_port={self.admin_port}",
            f"-metrics_host={self.host}",
            "-allocation_strategy=free_ratio_first",
            "-rpc_thread_num=2",
            "-default_kv_lease_ttl=1000",  # a read lease blocks removal; keep tests quick
            "-logtostderr",
        ]
        if self.multi_tenancy:
            argv += ["-enable_multi_tenants=true", f"-tenant_quota_connector_uri={self.policy_file}"]
        return argv + list(self.extra_args)

    def start(self, *, fresh_policy: bool = False, ready: bool = True) -> None:
        """Start (or restart) the master; the policy file survives restarts unless ``fresh_policy``.
        With ``ready=False`` it returns once ``/health`` answers (a standby never gets ready)."""
        bin_dir = ensure_installed()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if fresh_policy or not self.policy_file.exists():
            self.policy_file.write_text(EMPTY_POLICY)
        self._spawn(self.argv(bin_dir))
        self.wait_ready(ready=ready)

    def health(self) -> dict | None:
        try:
            status, body = http_get(f"{self.admin_url}/health", timeout=2)
        except OSError:
            return None
        return json.loads(body) if status == 200 else None

    def wait_ready(self, timeout: float = START_TIMEOUT_S, *, ready: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StoreError(f"mooncake_master exited:\n{self.log_tail()}")
            doc = self.health()
            if doc and (doc.get("service_ready") or not ready):
                return
            time.sleep(0.1)
        raise StoreError(f"mooncake_master not service_ready after {timeout}s:\n{self.log_tail()}")

    def metrics(self) -> dict[str, float]:
        """The master's unlabelled Prometheus gauges and counters."""
        status, body = http_get(f"{self.admin_url}/metrics")
        if status != 200:
            raise StoreError(f"GET /metrics: {status} {body[:200]}")
        out = {}
        for line in body.splitlines():
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
                try:
                    out[parts[0]] = float(parts[1])
                except ValueError:
                    continue
        return out

    def tenant_quotas(self) -> dict[str, dict]:
        """The master's own ledger, read back through its admin API: tenant id → snapshot."""
        status, body = http_get(f"{self.admin_url}/api/v1/tenant_quotas")
        if status != 200:
            raise StoreError(f"GET /api/v1/tenant_quotas: {status} {body}")
        return {row["tenant_id"]: row for row in json.loads(body)["data"]}

    def segments(self) -> list[dict]:
        status, body = http_get(f"{self.admin_url}/get_segments_detail")
        if status != 200:
            raise StoreError(f"GET /get_segments_detail: {status} {body}")
        return json.loads(body)["segments"]


@dataclass
class Member(_Process):
    """``mooncake_client``: a store member that mounts one DRAM segment into the master."""

    master: Master | None = None
    port: int = 0
    http_port: int = 0
    segment: str = "64MB"
    name: str = "mooncake-member"

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        assert self.master is not None
        bin_dir = ensure_installed()
        before = {s["segment_name"] for s in self.master.segments()}
        self._spawn(
            [
                str(bin_dir / "mooncake_client"),
                f"-master_server_address={self.master.client_address}",
                "-metadata_server=P2PHANDSHAKE",
                f"-global_segment_size={self.segment}",
                "-local_buffer_size=16MB",
                f"-host={self.master.host}",
                f"-port={self.port}",
                "-protocol=tcp",
                "-enable_http_server=true",
                f"-http_port={self.http_port}",
                "-logtostderr",
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StoreError(f"mooncake_client exited:\n{self.log_tail()}")
            if {s["segment_name"] for s in self.master.segments()} - before:
                return
            time.sleep(0.1)
        raise StoreError(f"mooncake_client mounted no segment in {timeout}s:\n{self.log_tail()}")


@dataclass
class RestMember(_Process):
    """``mc_store_rest_server``, the member program of the backend image (the wheel's
    ``mooncake.mooncake_store_service``), run with the argv and environment a member DaemonSet's
    container would get: the test hands it what the operator rendered."""

    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    name: str = "mooncake-rest-member"

    @property
    def port(self) -> int:
        return int(self.argv[self.argv.index("--port") + 1]) if "--port" in self.argv else 8080

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until its REST port answers (it serves only once its segment and tier
        are mounted, which is what a member's readiness probe relies on)."""
        bin_dir = ensure_installed()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.stop()
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [str(bin_dir / "mc_store_rest_server"), *self.argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **self.env},
        )
        log.close()
        self.pid_file.write_text(str(self.proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StoreError(f"mc_store_rest_server exited:\n{self.log_tail()}")
            try:
                status, _ = http_get(f"http://127.0.0.1:{self.port}/api/exist/probe", timeout=2)
            except OSError:
                status = 0
            if status:
                return
            time.sleep(0.2)
        raise StoreError(f"mc_store_rest_server served nothing in {timeout}s:\n{self.log_tail()}")


@dataclass
class Etcd(_Process):
    """A single-member etcd on loopback (the binary the local control plane builds), for the store's
    own etcd election backend."""

    binary: Path | None = None
    client_port: int = 0
    peer_port: int = 0
    name: str = "mooncake-etcd"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> None:
        assert self.binary is not None
        data = self.state_dir / "etcd-data"
        self._spawn(
            [
                str(self.binary),
                "--name=mooncake-ha",
                f"--data-dir={data}",
                f"--listen-client-urls=http://{self.endpoint}",
                f"--advertise-client-urls=http://{self.endpoint}",
                f"--listen-peer-urls=http://127.0.0.1:{self.peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer_port}",
                f"--initial-cluster=mooncake-ha=http://127.0.0.1:{self.peer_port}",
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StoreError(f"etcd exited:\n{self.log_tail()}")
            try:
                status, _ = http_get(f"http://{self.endpoint}/health", timeout=2)
            except OSError:
                status = 0
            if status == 200:
                return
            time.sleep(0.2)
        raise StoreError(f"etcd not healthy after {timeout}s:\n{self.log_tail()}")


def loopback(
    state_dir: Path, ports: str, base: int, *, segment: str = "64MB", host: str = "127.0.0.1"
) -> tuple[Master, Member]:
    """A master and one member mounting a ``segment`` DRAM segment, on ``base`` .. ``base + 3``
    (RPC, admin, member, member HTTP), each pinned by ``GPUSTACK_MOONCAKE_<ports>_{RPC,ADMIN,MEMBER,
    MEMBER_HTTP}_PORT``; on ``host`` (an address of this machine's, loopback unless told)."""
    master = Master(
        state_dir,
        rpc_port=port(f"{ports}_RPC", base),
        admin_port=port(f"{ports}_ADMIN", base + 1),
        host=host,
    )
    member = Member(
        state_dir,
        master=master,
        port=port(f"{ports}_MEMBER", base + 2),
        http_port=port(f"{ports}_MEMBER_HTTP", base + 3),
        segment=segment,
    )
    return master, member


@contextlib.contextmanager
def serving(master: Master, member: Member) -> Iterator[Master]:
    """The store running for the block, from an empty tenant policy; stopped on the way out."""
    master.start(fresh_policy=True)
    member.start()
    try:
        yield master
    finally:
        member.stop()
        master.stop()


def external_backend(name: str, master: Master, client: str | None = None) -> dict:
    """The KVCacheBackend ``name`` declaring ``master`` as an external store (``client``: another
    address for its Client endpoint)."""
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCacheBackend",
        "metadata": {"name": name},
        "spec": {
            "connection": {
                "external": {
                    "endpoints": [
                        {"name": "Client", "address": client or master.client_address},
                        {"name": "Admin", "address": master.admin_address},
                    ]
                }
            }
        },
    }


_WRITER = """
import json, sys
from mooncake.store import MooncakeDistributedStore
master, tenant, op, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
keys = sys.argv[5:]
store = MooncakeDistributedStore()
rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * 1024 * 1024, "tcp", "", master, tenant_id=tenant)
if rc != 0:
    print(json.dumps({"setup": rc})); sys.exit(0)
out = {}
for key in keys:
    if op == "put":
        out[key] = store.put(key, b"x" * size)
    elif op == "remove":
        out[key] = store.remove(key)
    else:
        out[key] = len(store.get(key))
print(json.dumps(out))
store.close()
"""


def _client(master: Master, tenant: str, op: str, keys: list[str], size: int = 0) -> dict[str, int]:
    """Run the store's own Python client as an engine would (``global_segment_size=0``)."""
    python = ensure_installed() / "python"
    proc = subprocess.run(
        [str(python), "-c", _WRITER, master.client_address, tenant, op, str(size), *keys],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise StoreError(
            f"store client {op} as {tenant!r} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    result = json.loads(lines[-1])
    if "setup" in result:
        raise StoreError(f"store client setup as {tenant!r} returned {result['setup']}")
    return result


def tenant_write(master: Master, tenant: str, keys: list[str], size: int = 1 << 20) -> dict[str, int]:
    """Put ``keys`` (``size`` bytes each) under ``tenant``; returns the store's code per key (0 = ok)."""
    return _client(master, tenant, "put", keys, size)


def tenant_remove(master: Master, tenant: str, keys: list[str]) -> dict[str, int]:
    return _client(master, tenant, "remove", keys)


def tenant_read(master: Master, tenant: str, keys: list[str]) -> dict[str, int]:
    """Get ``keys`` under ``tenant``; returns the byte length read per key (0 = miss)."""
    return _client(master, tenant, "get", keys)
