"""One file's download against the local hub: redirects without the credential, verification while
streaming, parallel ranges, retry from the last byte, resume from a checkpoint, and refusals."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from api import delivery as d
from api.manifest import ManifestFile
from modelhub.connection import HubConnection
from nodeplugins.modelmanager import throttle
from nodeplugins.modelmanager.download import FileDownload, Limits, PiecePool, Tuning, _Writer
from nodeplugins.modelmanager.fetch import FetchError, Source
from nodeplugins.modelmanager.hashing import ResumableHash
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit
from tests.hub.server import Fault, HubServer
from tests.unit.delivery.conftest import LARGE_SIZE, TOKEN

SMALL = Tuning(
    chunk=64 << 10,
    piece_size=1 << 20,
    window=3,
    ranged_above=2 << 20,
    checkpoint_bytes=1 << 20,
    stall_timeout=0.5,
    retries=3,
)


def entry_for(hub: HubServer, repo: str, path: str) -> ManifestFile:
    record = hub.repos.load(repo)
    f = next(f for f in record.files(record.refs["main"]) if f.path == path)
    return (
        ManifestFile(f.path, f.size, "sha256", f.sha256)
        if f.lfs
        else ManifestFile(f.path, f.size, "gitsha1", f.oid)
    )


class Run:
    def __init__(
        self,
        hub: HubServer,
        tmp: Path,
        repo: str,
        path: str,
        *,
        token: str | None = None,
        tuning: Tuning = SMALL,
        limit: int = 4,
        cancel_after: int | None = None,
    ) -> None:
        record = hub.repos.load(repo)
        url = hub.url(repo, path, record.refs["main"])
        self.entry = entry_for(hub, repo, path)
        self.dest = tmp / "model" / path
        self.received = 0
        self.cancel_after = cancel_after
        self.lock = threading.Lock()
        self.job = FileDownload(
            self.entry,
            self.dest,
            tmp / "state" / (hashlib.sha1(path.encode()).hexdigest() + ".json"),
            Source(HubConnection(hub.endpoint), url, token),
            Limits(RequestLimit(limit), ByteRate(0)),
            tuning,
            self._progress,
            lambda: self.cancel_after is not None and self.received >= self.cancel_after,
        )
        self.job.state.parent.mkdir(parents=True, exist_ok=True)

    def _progress(self, n: int) -> None:
        with self.lock:
            self.received += n

    def run(self) -> None:
        self.job.run()


def test_small_file_is_verified_by_its_git_blob_id(hub: HubServer, tmp_path: Path) -> None:
    run = Run(hub, tmp_path, "org/public", "tokenizer/vocab.txt")
    run.run()
    assert run.dest.read_bytes() == b"a\nb\nc\n"
    assert run.received == 6 and run.job.done()


def test_lfs_file_follows_the_redirect_and_the_token_stays_home(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    hub.repos.grant("org/public", TOKEN)
    run = Run(hub, tmp_path, "org/public", "model.safetensors", token=TOKEN)
    hub.clear_log()
    run.run()
    assert run.dest.read_bytes() == large_file.read_bytes()
    assert run.received == LARGE_SIZE
    resolve, cdn = hub.log("resolve"), hub.log("cdn")
    assert resolve and all(e["auth"] == "known" for e in resolve)
    assert cdn and all(e["auth"] == "none" and e["host"].startswith("localhost") for e in cdn)
    # Parallel ranges: twelve 1 MiB pieces, all but the first sent straight to where the first
    # one's redirect led (one signed URL per file, not one hub round trip per range).
    assert len(cdn) == LARGE_SIZE // (1 << 20)
    assert {e["status"] for e in cdn} == {206}
    assert len(resolve) <= SMALL.window  # the pieces that started before the first one landed


def test_an_expired_landing_is_asked_of_the_hub_again(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    record = hub.repos.load("org/public")
    url = hub.url("org/public", "model.safetensors", record.refs["main"])
    armed = threading.Event()

    def progress(n: int) -> None:
        # Once two pieces are in, the CDN refuses the next range (its signature expired meanwhile).
        if not armed.is_set() and job.verified() >= 2 << 20:
            armed.set()
            hub.set_faults(Fault("status", kind="cdn", status=403, times=1))

    job = FileDownload(
        entry_for(hub, "org/public", "model.safetensors"),
        tmp_path / "model.safetensors",
        tmp_path / "state.json",
        Source(HubConnection(hub.endpoint), url),
        Limits(RequestLimit(1), ByteRate(0)),
        Tuning(**{**SMALL.__dict__, "window": 2}),
        progress,
        lambda: False,
    )
    hub.clear_log()
    job.run()
    assert (tmp_path / "model.safetensors").read_bytes() == large_file.read_bytes()
    assert [e["status"] for e in hub.log("cdn")].count(403) == 1
    # The first range and the one whose landing was refused went to the hub; the rest did not.
    assert len(hub.log("resolve")) == 2


def test_a_cut_body_is_retried_from_its_last_byte(hub: HubServer, tmp_path: Path, large_file: Path) -> None:
    hub.set_faults(Fault("truncate", kind="cdn", after=300_000, times=1))
    run = Run(
        hub, tmp_path, "org/public", "model.safetensors", tuning=Tuning(**{**SMALL.__dict__, "window": 1})
    )
    run.run()
    assert run.dest.read_bytes() == large_file.read_bytes()
    cdn = hub.log("cdn")
    assert cdn[0]["sent"] == 300_000
    assert cdn[1]["range"] == f"bytes=300000-{LARGE_SIZE - 1}"
    assert sum(e["sent"] for e in cdn) == LARGE_SIZE  # nothing fetched twice


def test_a_stalled_range_is_retried_from_its_last_byte(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    hub.set_faults(Fault("stall", kind="cdn", after=200_000, seconds=3, times=1))
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    run.run()
    assert run.dest.read_bytes() == large_file.read_bytes()
    stalled = next(e for e in hub.log("cdn") if e["sent"] == 200_000)
    start = int(stalled["range"].split("=")[1].split("-")[0])
    # The retry starts past the stalled range's start, at the last chunk boundary it received.
    retries = [
        e for e in hub.log("cdn") if e["seq"] > stalled["seq"] and e["range"].endswith(stalled["range"][-8:])
    ]
    resumed = [int(e["range"].split("=")[1].split("-")[0]) for e in retries]
    assert start + 3 * SMALL.chunk in resumed


def test_tampered_bytes_are_an_integrity_mismatch_and_the_file_is_discarded(
    hub: HubServer, tmp_path: Path
) -> None:
    hub.repos.tamper("org/public", "config.json", offset=3)
    run = Run(hub, tmp_path, "org/public", "config.json")
    with pytest.raises(FetchError) as raised:
        run.run()
    assert raised.value.reason == d.INTEGRITY_MISMATCH
    assert not run.dest.exists()


def test_tampered_large_file_is_refused_too(hub: HubServer, tmp_path: Path) -> None:
    hub.repos.tamper("org/public", "model.safetensors", offset=LARGE_SIZE - 1)
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    with pytest.raises(FetchError) as raised:
        run.run()
    assert raised.value.reason == d.INTEGRITY_MISMATCH
    assert not run.dest.exists() and not run.job.state.exists()


def test_a_canceled_download_resumes_from_its_checkpoint(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    tuning = Tuning(**{**SMALL.__dict__, "window": 1})
    first = Run(hub, tmp_path, "org/public", "model.safetensors", tuning=tuning, cancel_after=5 << 20)
    with pytest.raises(FetchError) as raised:
        first.run()
    assert raised.value.reason == d.CANCELED
    hub.clear_log()
    second = Run(hub, tmp_path, "org/public", "model.safetensors", tuning=tuning)
    second.run()
    assert second.dest.read_bytes() == large_file.read_bytes()
    # It restarted at a checkpoint (a multiple of 1 MiB, at least 4 MiB in) and fetched only the rest.
    start = int(hub.log("cdn")[0]["range"].split("=")[1].split("-")[0])
    assert start >= 4 << 20 and start % (1 << 20) == 0
    assert sum(e["sent"] for e in hub.log("cdn")) == LARGE_SIZE - start


def test_ranges_that_keep_failing_give_up_as_source_unavailable(hub: HubServer, tmp_path: Path) -> None:
    hub.set_faults(Fault("status", kind="resolve", status=503))
    run = Run(hub, tmp_path, "org/public", "config.json")
    with pytest.raises(FetchError) as raised:
        run.run()
    assert raised.value.reason == d.SOURCE_UNAVAILABLE
    assert len(hub.log("resolve")) == SMALL.retries


def test_a_refused_credential_is_access_denied(hub: HubServer, tmp_path: Path) -> None:
    run = Run(hub, tmp_path, "org/private", "config.json", token="hf_wrong")
    with pytest.raises(FetchError) as raised:
        run.run()
    assert raised.value.reason == d.ACCESS_DENIED
    assert "hf_wrong" not in raised.value.message + raised.value.detail


def test_garbage_bytes_of_the_right_length_are_refused(hub: HubServer, tmp_path: Path) -> None:
    hub.set_faults(Fault("garbage", kind="resolve"))
    run = Run(hub, tmp_path, "org/public", "README.md")
    with pytest.raises(FetchError) as raised:
        run.run()
    assert raised.value.reason == d.INTEGRITY_MISMATCH


def test_the_request_limit_bounds_parallel_ranges(hub: HubServer, tmp_path: Path, large_file: Path) -> None:
    limit = RequestLimit(1)
    peak = 0
    original = limit.acquire

    def acquire(cancelled=lambda: False) -> bool:
        nonlocal peak
        got = original(cancelled)
        peak = max(peak, limit.held)
        return got

    limit.acquire = acquire  # type: ignore[method-assign]
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    run.job.limits = Limits(limit, ByteRate(0))
    run.run()
    assert peak == 1 and run.dest.read_bytes() == large_file.read_bytes()


def test_byte_rate_bucket_paces_takers(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(throttle.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    bucket = ByteRate(1000, clock=lambda: now[0])
    bucket.take(1000)  # one second's burst passes at once
    assert now[0] == 0.0
    for _ in range(3):
        bucket.take(500)
    # 1500 bytes past the burst at 1000 B/s: the last taker starts one second in (it owes the rest).
    assert 0.99 <= now[0] <= 1.1
    unlimited = ByteRate(0, clock=lambda: now[0])
    before = now[0]
    unlimited.take(10**9)
    assert now[0] == before


def test_a_plain_http_hub_never_loads_the_tls_context(hub: HubServer, tmp_path: Path) -> None:
    """Building the TLS context reads the system's CA bundle (tens of milliseconds of CPU): a
    download from an ``http://`` endpoint must not pay for it."""

    class NoTLS(HubConnection):
        @property
        def ssl_context(self):  # type: ignore[override]
            raise AssertionError("an http:// download asked for the TLS context")

    run = Run(hub, tmp_path, "org/public", "tokenizer/vocab.txt")
    run.job.source = Source(NoTLS(hub.endpoint), run.job.source.url, None)
    run.run()
    assert run.dest.read_bytes() == b"a\nb\nc\n"


class CountingPool(PiecePool):
    """A piece pool that counts the buffers of each size it hands out."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: dict[int, int] = {}

    def take(self, size: int):
        self.taken[size] = self.taken.get(size, 0) + 1
        return super().take(size)


def test_the_piece_the_hash_reached_hashes_as_it_arrives_and_the_others_wait(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    pool = CountingPool()
    job = run.job
    job.limits = Limits(RequestLimit(4), ByteRate(0), pool)
    job.dest.parent.mkdir(parents=True)
    job._fd = os.open(job.dest, os.O_RDWR | os.O_CREAT, 0o644)
    piece = SMALL.piece_size
    data = large_file.read_bytes()
    try:
        writer = _Writer(job._fd, ResumableHash("sha256", LARGE_SIZE), 0, job)
        head = job._piece(writer, 0, piece)  # the hash is at its first byte: it is the head
        assert head.hashed == head.length == piece and head.buffer is None
        assert SMALL.piece_size not in pool.taken  # hashed through the small chunk buffer
        assert writer.position == piece
        assert writer.hasher.hexdigest() == hashlib.sha256(data[:piece]).hexdigest()
        later = job._piece(writer, 2 * piece, 3 * piece)  # the hash has not reached it
        assert (
            later.hashed == 0
            and later.buffer is not None
            and bytes(later.buffer[:piece]) == data[2 * piece : 3 * piece]
        )
        assert writer.position == piece  # nobody hashed it out of order
        later.release(pool)
    finally:
        os.close(job._fd)


def test_pieces_that_arrive_before_the_hash_reaches_them_wait_and_verify(
    hub: HubServer, tmp_path: Path, large_file: Path
) -> None:
    """The first range is slow: the later ones arrive first, wait in piece buffers, and the file
    still verifies byte for byte (hashed in order, by the head catching up and by the loop)."""
    hub.set_faults(Fault("slow", kind="cdn", rate=2_000_000, times=1))
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    pool = CountingPool()
    run.job.limits = Limits(RequestLimit(4), ByteRate(0), pool)
    run.run()
    assert run.dest.read_bytes() == large_file.read_bytes()
    assert pool.taken.get(SMALL.piece_size, 0) >= 1  # something had to wait
    assert run.received == LARGE_SIZE  # every byte hashed once


@pytest.mark.parametrize(
    ("alongside", "ranged"), [(1, True), (SMALL.window - 1, True), (SMALL.window, False)]
)
def test_a_large_file_is_ranged_unless_enough_large_files_run_beside_it(
    hub: HubServer, tmp_path: Path, large_file: Path, alongside: int, ranged: bool
) -> None:
    run = Run(hub, tmp_path, "org/public", "model.safetensors")
    run.job.alongside = alongside
    run.run()
    assert run.dest.read_bytes() == large_file.read_bytes()
    requests = hub.log("cdn")
    assert (len(requests) > 1) is ranged
