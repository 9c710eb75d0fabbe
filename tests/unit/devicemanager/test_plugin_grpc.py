"""The device-plugin API over real gRPC on unix sockets, with a stand-in kubelet registration
server: registration, re-registration when kubelet.sock is re-created, ListAndWatch health pushed
at the reserve instant, GetPreferredAllocation and Allocate (grants and FailedPrecondition)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.nvidia import NvidiaBackend
from nodeplugins.devicemanager.kubelet import KubeletLink, unix_target
from nodeplugins.devicemanager.plugin import DevicePlugin, Watchers, pb, pb_grpc
from tests.unit.devicemanager.conftest import make_allocator, pod

REPO = Path(__file__).resolve().parents[3]

BASE = "nvidia.com/gpu"


class Kubelet(pb_grpc.RegistrationServicer):
    """Records Register calls (the part of the kubelet a plugin talks to first)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.requests: list = []
        self.server: grpc.Server | None = None

    def Register(self, request, context):
        self.requests.append(request)
        return pb.Empty()

    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(unix_target(self.socket))
        self.server.start()

    def restart(self) -> None:
        """What a kubelet restart does: every file in device-plugins/ is removed, kubelet.sock re-created."""
        assert self.server is not None
        self.server.stop(0).wait()
        for path in self.socket.parent.iterdir():
            path.unlink()
        self.start()


def wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def short_dir():
    """Unix socket paths are limited to 107 bytes: pytest's tmp_path is too deep."""
    path = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def setup(short_dir):
    plugin_dir = tempfile_dir = short_dir
    kubelet = Kubelet(plugin_dir / "kubelet.sock")
    kubelet.start()
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 2}])
    watchers = Watchers()
    watchers.follow(allocator)
    recorded: list = []
    plugins = [
        DevicePlugin(r, allocator, NvidiaBackend(), recorded.append, watchers) for r in tk.resources("nvidia")
    ]
    link = KubeletLink(plugins, kubelet.socket, poll=0.1)
    link.start()
    yield kubelet, allocator, plugins, link, recorded, tempfile_dir
    link.stop()
    watchers.close()
    kubelet.server.stop(0)


def stub(plugin_dir: Path, resource: tk.Resource):
    channel = grpc.insecure_channel(f"unix://{plugin_dir / resource.socket}")
    return channel, pb_grpc.DevicePluginStub(channel)


def test_registration_allocation_and_health_push(setup):
    kubelet, allocator, plugins, _link, recorded, plugin_dir = setup
    wait(lambda: len(kubelet.requests) == len(plugins))
    assert {r.resource_name for r in kubelet.requests} == {p.resource.name for p in plugins}
    assert all(
        r.version == "v1beta1" and r.options.get_preferred_allocation_available for r in kubelet.requests
    )
    exclusive = next(p.resource for p in plugins if p.resource.family == "exclusive")
    shared = next(p.resource for p in plugins if p.resource.family == "shared")
    channel, dp = stub(plugin_dir, shared)
    stream = dp.ListAndWatch(pb.Empty())
    first = next(stream)
    assert len(first.devices) == 20 and {d.health for d in first.devices} == {"Healthy"}
    # A whole card is taken: the shared tokens of that card turn Unhealthy at once.
    allocator.pod_event("ADDED", pod("whole", {BASE: 1}))
    ex_channel, ex = stub(plugin_dir, exclusive)
    token = next(d.ID for d in next(ex.ListAndWatch(pb.Empty())).devices)
    preferred = ex.GetPreferredAllocation(
        pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=[token], allocation_size=1)
            ]
        )
    )
    assert list(preferred.container_responses[0].deviceIDs) == [token]
    answer = ex.Allocate(
        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[token])])
    )
    env = answer.container_responses[0].envs
    card_id = tk.parse_token(token)[1]
    assert env["NVIDIA_VISIBLE_DEVICES"] == card_id and recorded[0].container == "main"
    update = next(stream)
    unhealthy = {d.ID for d in update.devices if d.health == "Unhealthy"}
    assert unhealthy == {d.ID for d in update.devices if tk.parse_token(d.ID)[1] == card_id}
    # The same card again, for a shared Pod: FailedPrecondition naming the mode.
    allocator.pod_event("ADDED", pod("share", {f"{BASE}.shared": 1}))
    held_token = next(d.ID for d in update.devices if tk.parse_token(d.ID)[1] == card_id)
    with pytest.raises(grpc.RpcError) as refused:
        dp.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[held_token])])
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "held in exclusive mode" in refused.value.details()
    channel.close()
    ex_channel.close()


def test_a_restarted_kubelet_gets_every_plugin_registered_again(setup):
    kubelet, _allocator, plugins, _link, _recorded, plugin_dir = setup
    wait(lambda: len(kubelet.requests) == len(plugins))
    kubelet.restart()
    # Whole rounds after the restart (a round begun while the restart wiped the directory is
    # followed by another), every socket served again, the last round naming every plugin.
    wait(
        lambda: (
            len(kubelet.requests) >= 2 * len(plugins)
            and len(kubelet.requests) % len(plugins) == 0
            and all((plugin_dir / p.resource.socket).exists() for p in plugins)
        )
    )
    assert [r.resource_name for r in kubelet.requests[-len(plugins) :]] == [p.resource.name for p in plugins]
    channel, dp = stub(plugin_dir, plugins[0].resource)
    assert dp.GetDevicePluginOptions(pb.Empty()).get_preferred_allocation_available
    channel.close()


def test_a_restarted_kubelet_is_seen_without_waiting_for_the_poll(short_dir):
    """The restarted kubelet re-admits the node's Pods within about a second, and refuses one whose
    device's plugin has not registered again: the link wakes on the new kubelet.sock itself. With a
    poll of an hour, only that wake can register again within the wait."""
    kubelet = Kubelet(short_dir / "kubelet.sock")
    kubelet.start()
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 1}])
    plugins = [
        DevicePlugin(r, allocator, NvidiaBackend(), lambda _h: None, Watchers())
        for r in tk.resources("nvidia")
    ]
    link = KubeletLink(plugins, kubelet.socket, poll=3600)
    link.start()
    try:
        wait(lambda: link.registrations == 1 and len(kubelet.requests) == len(plugins))
        kubelet.restart()
        wait(
            lambda: (
                len(kubelet.requests) >= 2 * len(plugins)
                and all((short_dir / p.resource.socket).exists() for p in plugins)
            ),
            timeout=30,
        )
        assert link.registrations >= 2
    finally:
        link.stop()
        kubelet.server.stop(0)


def test_listed_waits_for_every_device_list_and_again_after_a_kubelet_restart(setup):
    """Registered is not enough: the kubelet counts a resource's devices unhealthy (and refuses a
    Pod asking for one) until that resource's ListAndWatch has sent its list, so ``listed()``
    (what ``/readyz`` answers) is true only once every stream has, and false again after the
    kubelet comes back until it has read them anew."""
    kubelet, _allocator, plugins, link, _recorded, plugin_dir = setup

    def read_every_list() -> list:
        opened = []
        for plugin in plugins:
            channel, dp = stub(plugin_dir, plugin.resource)
            stream = dp.ListAndWatch(pb.Empty())
            next(stream)  # a list, empty where the node has no such device
            opened.append((channel, stream))
        return opened

    wait(lambda: link.registrations >= 1)
    assert not link.listed()
    opened = read_every_list()
    wait(link.listed)
    kubelet.restart()
    wait(lambda: link.registrations >= 2)
    assert not link.listed()
    for channel, stream in opened:
        stream.cancel()
        channel.close()
    wait(lambda: all((plugin_dir / p.resource.socket).exists() for p in plugins))
    for channel, stream in read_every_list():
        wait(link.listed)
        stream.cancel()
        channel.close()


def test_a_kubelet_that_refuses_registration_is_retried(short_dir):
    plugin_dir = short_dir

    class Refusing(Kubelet):
        calls = 0

        def Register(self, request, context):
            Refusing.calls += 1
            if Refusing.calls <= 2:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resource name taken")
            return super().Register(request, context)

    kubelet = Refusing(plugin_dir / "kubelet.sock")
    kubelet.start()
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 1}])
    plugins = [
        DevicePlugin(tk.resources("nvidia")[0], allocator, NvidiaBackend(), lambda _h: None, Watchers())
    ]
    link = KubeletLink(plugins, kubelet.socket, poll=0.05)
    link.start()
    try:
        wait(lambda: link.registrations >= 1)
        assert Refusing.calls >= 3
    finally:
        link.stop()
        kubelet.server.stop(0)
    assert threading.active_count() >= 1


def test_sockets_deeper_than_the_unix_limit_are_served_relative(tmp_path, monkeypatch):
    from nodeplugins.devicemanager.kubelet import work_beside

    deep = tmp_path / ("d" * 60) / ("e" * 60) / "device-plugins"
    socket = deep / "kubelet.sock"
    assert len(str(socket)) > 107
    monkeypatch.chdir(tmp_path)
    work_beside(socket)
    assert Path.cwd() == deep.resolve()
    assert unix_target(socket) == "unix:kubelet.sock"
    assert unix_target("/tmp/x.sock") == "unix:///tmp/x.sock"
    kubelet = Kubelet(socket)
    kubelet.start()
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 1}])
    plugins = [
        DevicePlugin(tk.resources("nvidia")[0], allocator, NvidiaBackend(), lambda _h: None, Watchers())
    ]
    link = KubeletLink(plugins, socket, poll=0.05)
    link.start()
    try:
        wait(lambda: len(kubelet.requests) == 1)
        assert (deep / plugins[0].resource.socket).exists()
    finally:
        link.stop()
        kubelet.server.stop(0)


def test_parallel_allocates_over_grpc_never_hand_a_card_to_two_containers(short_dir):
    """Many kubelet calls at once for different containers on one node, racing for the same cards
    in two modes: every grant names its own container, an exclusive card has one holder, a shared
    card at most ten, no card is held in two modes, and the ledger says exactly that."""
    import random

    from api.manufacturers import UNITS_PER_CARD

    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 6}])
    resources = {r.family: r for r in tk.resources("nvidia")}
    for i in range(16):
        allocator.pod_event("ADDED", pod(f"whole-{i}", {BASE: 1}))
        allocator.pod_event("ADDED", pod(f"share-{i}", {f"{BASE}.shared": 2}))
    watchers = Watchers()
    watchers.follow(allocator)
    servers = []
    for family in ("exclusive", "shared"):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        plugin = DevicePlugin(resources[family], allocator, NvidiaBackend(), lambda _h: None, watchers)
        pb_grpc.add_DevicePluginServicer_to_server(plugin, server)
        server.add_insecure_port(unix_target(short_dir / resources[family].socket))
        server.start()
        servers.append(server)
    group = allocator.groups[0]["id"]
    cards = [c.id for c in allocator.inventory.cards]
    rng = random.Random(12)
    calls = [("exclusive", [tk.token_id(group, rng.choice(cards), 0)]) for _ in range(16)]
    calls += [
        ("shared", [tk.token_id(group, c, rng.randrange(10)) for c in rng.sample(cards, 2)])
        for _ in range(16)
    ]
    rng.shuffle(calls)
    start = threading.Barrier(len(calls))
    outcomes: list = []
    lock = threading.Lock()

    def call(family: str, ids: list[str]) -> None:
        channel = grpc.insecure_channel(unix_target(short_dir / resources[family].socket))
        stub = pb_grpc.DevicePluginStub(channel)
        start.wait()
        try:
            answer = stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
            )
            result = ("granted", family, answer.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"])
        except grpc.RpcError as error:
            result = ("refused", family, error.code())
        finally:
            channel.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=call, args=c) for c in calls]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        watchers.close()
        for server in servers:
            server.stop(0)
    granted = [o for o in outcomes if o[0] == "granted"]
    assert len(outcomes) == len(calls) and granted
    assert {o[2] for o in outcomes if o[0] == "refused"} <= {grpc.StatusCode.FAILED_PRECONDITION}
    held = list(allocator.held.values())
    assert len(held) == len(granted) == len({h.key for h in held})  # one reservation per container
    holders: dict[str, list] = {}
    for h in held:
        for g in h.grants:
            holders.setdefault(g.card.id, []).append((h.family, g.units))
    rows = {card_id: row for (_g, card_id), row in allocator.row_index().items()}
    for card_id in cards:
        families = {f for f, _u in holders.get(card_id, [])}
        assert len(families) <= 1, f"card {card_id} held in two modes: {families}"
        if families == {"exclusive"}:
            assert (
                len(holders[card_id]) == 1 and rows[card_id]["mode"] == 1 and rows[card_id]["remaining"] == 0
            )
        elif families == {"shared"}:
            assert len(holders[card_id]) <= 10 and rows[card_id]["mode"] == 2
            assert rows[card_id]["remaining"] == UNITS_PER_CARD - sum(u for _f, u in holders[card_id])
        else:
            assert rows[card_id]["mode"] == 0 and rows[card_id]["remaining"] == UNITS_PER_CARD
    for _granted, family, visible in granted:
        assert len(visible.split(",")) == (1 if family == "exclusive" else 2)


def test_streams_wake_only_when_the_health_stamp_moves():
    class Stamped:
        def __init__(self) -> None:
            self.listeners: list = []
            self.stamp: tuple = ("a",)

        def health_stamp(self) -> tuple:
            return self.stamp

    allocator = Stamped()
    watchers = Watchers()
    watchers.follow(allocator)  # type: ignore[arg-type]  # the stamp and listeners are all it reads
    (changed,) = allocator.listeners
    changed()
    assert watchers.version == 1  # the first change is always announced
    changed()
    assert watchers.version == 1  # a reservation that moved no token's health wakes nobody
    allocator.stamp = ("b",)
    changed()
    assert watchers.version == 2
    watchers.bump()  # other moves (an interface pass, a new inventory) still wake every stream
    assert watchers.version == 3


@pytest.mark.skipif(os.getuid() != 0, reason="dropping capabilities with setpriv needs root")
def test_a_socket_directory_an_agent_without_capabilities_cannot_write_is_named_with_the_fix() -> None:
    """The agent's check in a process holding no capabilities (what a privileged container's process
    running as uid 65532 has: CapEff 0) in a kubelet directory it does not own: the reason it says
    in its log and /readyz."""
    import subprocess
    import sys

    from nodeplugins.privileges import socket_dir_problem

    root = Path(tempfile.mkdtemp(prefix="gpustack-kubelet-"))
    try:
        (root / "device-plugins").mkdir(mode=0o755)
        os.chown(
            root / "device-plugins", 65532, 65532
        )  # not the checking process's, as root's is not 65532's
        socket = root / "device-plugins" / "kubelet.sock"
        code = f"from nodeplugins.privileges import socket_dir_problem; print(socket_dir_problem({str(socket)!r}, 'device-plugin sockets'))"
        out = subprocess.run(
            ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", sys.executable, "-c", code],
            capture_output=True, text=True, cwd=REPO, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        ).stdout  # fmt: skip
        assert f"cannot create the device-plugin sockets in {socket.parent}: Permission denied" in out, out
        assert "runAsUser: 0" in out, out
        assert socket_dir_problem(socket, "device-plugin sockets") is None  # with its capabilities, root may
    finally:
        shutil.rmtree(root)
