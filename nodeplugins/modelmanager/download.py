"""Downloading one manifest file: verified while streaming, resumable from the last verified byte
(model-delivery spec §4.5 steps 3-4).

The file is hashed strictly in byte order and nothing is ever read back from disk to verify it. A
large remainder is fetched as parallel byte ranges ("pieces", at most ``window`` at once per file);
each piece is written at its offset as soon as it arrives; the piece the hash has reached hashes
its bytes as they arrive, the others hold theirs in memory until the hash reaches them. Every
``checkpoint_bytes`` the hashed offset and the saved hash state are recorded next to the file; a
restart truncates the file to the checkpoint and continues from there. Within one boot the
page cache already holds what was written, so such a checkpoint needs no sync; every
``durable_bytes`` (and at the end) the data is synced first and the checkpoint marked durable, and
after a reboot only a durable checkpoint is trusted. A request that fails or stalls is retried from
its last received byte; ``retries`` failures in a row with no progress give up
(``SourceUnavailable``). A final hash or size mismatch discards the file (``IntegrityMismatch``).
"""

from __future__ import annotations

import base64
import ctypes
import errno
import json
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from api import delivery as d
from api.manifest import ManifestFile
from nodeplugins.modelmanager.fetch import Body, FetchError, Landing, Source, open_range
from nodeplugins.modelmanager.hashing import ResumableHash
from nodeplugins.modelmanager.libc import LIBC
from nodeplugins.modelmanager.throttle import ByteRate, RequestLimit


@dataclass(frozen=True)
class Tuning:
    """Knobs with production defaults; tests shrink them."""

    chunk: int = 1 << 20
    piece_size: int = 16 << 20
    window: int = 4
    ranged_above: int = 64 << 20
    checkpoint_bytes: int = 64 << 20
    durable_bytes: int = 1 << 30
    stall_timeout: float = 30.0
    retries: int = 5


class PiecePool:
    """Reusable piece buffers, so a large download maps (and the kernel zeroes) a piece's memory
    once per buffer rather than once per piece. Buffers are anonymous mappings: no user-space
    zeroing, and their memory goes back to the system when dropped. At most ``keep`` idle buffers
    are held; :meth:`clear` lets them go when the node's downloads end."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        with self._lock:
            for index, buf in enumerate(self._free):
                if len(buf) == size:
                    return self._free.pop(index)
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def give_view(self, view: memoryview) -> None:
        """Release ``view`` (over a buffer :meth:`take` handed out) and keep its buffer."""
        buf = view.obj
        view.release()
        self.give(cast(mmap.mmap, buf))

    def give(self, buf: mmap.mmap) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buf)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


@dataclass
class Limits:
    requests: RequestLimit
    rate: ByteRate
    pieces: PiecePool = field(default_factory=PiecePool)


class Canceled(Exception):
    """The attempt was canceled; partial bytes stay for a resume."""


def _cancel_error() -> FetchError:
    return FetchError(d.CANCELED, "no mount asked for this model for five minutes")


class FileDownload:
    """Brings ``entry`` to ``dest`` (checkpoint in ``state``), reporting verified bytes to ``progress``."""

    def __init__(
        self,
        entry: ManifestFile,
        dest: Path,
        state: Path,
        source: Source,
        limits: Limits,
        tuning: Tuning,
        progress: Callable[[int], None],
        cancelled: Callable[[], bool],
    ) -> None:
        self.entry = entry
        self.dest = dest
        self.state = state
        self.source = source
        self.limits = limits
        self.tuning = tuning
        self.progress = progress
        self.cancelled = cancelled
        # Large files of this download fetched at once, this one included (the materializer sets
        # it): with ``window`` or more, their own streams already hold that many connections.
        self.alongside = 1
        self._abandon = False
        self._fd = -1
        self._landing: Landing | None = None  # where the first request's redirects led

    # --- checkpoints ---------------------------------------------------------------------------------

    def done(self) -> bool:
        saved = self._load_state()
        return bool(saved.get("done")) and self.dest.exists() and self.dest.stat().st_size == self.entry.size

    def _load_state(self) -> dict:
        try:
            return json.loads(self.state.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _resume(self) -> tuple[int, ResumableHash]:
        saved = self._load_state()
        # Within this boot the page cache holds every write; after a reboot only synced data does.
        key = "" if saved.get("boot") == _boot_id() else "durable_"
        offset = saved.get(key + "offset")
        if isinstance(offset, int) and 0 < offset <= self.entry.size and self.dest.exists():
            state = base64.b64decode(saved.get(key + "hash", ""))
            restored = ResumableHash.restore(self.entry.algo, self.entry.size, state)
            if restored is not None and self.dest.stat().st_size >= offset:
                return offset, restored
        return 0, ResumableHash(self.entry.algo, self.entry.size)

    def verified(self) -> int:
        """Bytes already verified on disk: what a run starts from (all of them when done)."""
        if self.done():
            return self.entry.size
        return self._resume()[0]

    def _checkpoint(
        self, fd: int, offset: int, hasher: ResumableHash, *, done: bool = False, durable: bool = False
    ) -> None:
        state = hasher.state()
        if state is None and not done:
            return  # no saved hash state on this machine: a restart begins the file again
        previous = self._load_state()
        record: dict[str, object] = {
            "offset": offset,
            "algo": self.entry.algo,
            "done": done,
            "boot": _boot_id(),
        }
        if state is not None:
            record["hash"] = base64.b64encode(state).decode()
        if durable or done:
            # A finished file is synced whole, once (its inode too, so publication's own sync of
            # it finds nothing left to write); a mid-file checkpoint needs its data only.
            (os.fsync if done else os.fdatasync)(fd)
            record["durable_offset"], record["durable_hash"] = offset, record.get("hash", "")
        else:
            _start_writeback(fd)  # so the final sync finds little left to write
            if previous.get("boot") == _boot_id() or "durable_offset" in previous:
                for key in ("durable_offset", "durable_hash"):
                    if key in previous:
                        record[key] = previous[key]
        tmp = self.state.with_name(self.state.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(record, f)
            # A finished file's record is not synced: lost in a crash, the file resumes from its
            # last durable checkpoint; publication follows at once and removes it anyway.
            if durable and not done:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.state)

    def discard(self) -> None:
        for path in (self.dest, self.state):
            path.unlink(missing_ok=True)

    # --- the download ----------------------------------------------------------------------------------

    def run(self) -> None:
        """Download and verify; raises :class:`FetchError` (``IntegrityMismatch`` after discarding).

        ``progress`` hears of newly verified bytes only; :meth:`verified` tells what was resumed."""
        try:
            self._run()
        except FetchError as error:
            error.detail = f"{self.entry.path}: {error.detail}" if error.detail else self.entry.path
            raise

    def _run(self) -> None:
        if self.done():
            return
        offset, hasher = self._resume()
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dest, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, offset)  # nothing unverified stays past the checkpoint
            self._fd = fd
            writer = _Writer(fd, hasher, offset, self)
            remaining = self.entry.size - offset
            if self._ranged(remaining):
                self._pieces(writer, offset)
            elif remaining > 0 or self.entry.size == 0:
                self._stream(writer, offset)
            if writer.position != self.entry.size or hasher.hexdigest() != self.entry.hex:
                os.close(fd)
                fd = -1
                self.discard()
                raise FetchError(d.INTEGRITY_MISMATCH, "a file's hash or size does not match the manifest")
            self._checkpoint(fd, writer.position, hasher, done=True)
        finally:
            if fd >= 0:
                os.close(fd)

    def _ranged(self, remaining: int) -> bool:
        """Parallel ranges for a large remainder, unless enough other large files of the download
        run beside it: then each file's single stream gives the download its connections, and
        no piece waits in memory for the hash (cheaper where the link is not the limit)."""
        window = self.tuning.window
        return remaining > self.tuning.ranged_above and window > 1 and self.alongside < window

    def _stream(self, writer: _Writer, offset: int) -> None:
        """One request for the whole remainder, written as it arrives; retried from the last byte."""
        chunk = memoryview(bytearray(self.tuning.chunk))

        def consume(data: memoryview) -> None:
            writer.write(data)

        self._fetch(offset, self.entry.size, lambda at, n: chunk[:n], consume)

    def _pieces(self, writer: _Writer, offset: int) -> None:
        """Parallel byte ranges of ``piece_size``, at most ``window`` at once, each written at its
        offset as it arrives. The piece the hash has reached (the head) hashes its chunks as they
        arrive, in a small buffer still in the CPU's caches; the others keep theirs in a piece
        buffer until the hash reaches them: the head's thread catches up on what it buffered before
        it became the head, and here each finished piece's unhashed rest is hashed in byte order."""
        size, piece = self.entry.size, self.tuning.piece_size
        spans = [(a, min(a + piece, size)) for a in range(offset, size, piece)]
        futures: dict[int, Future[_Received]] = {}
        with ThreadPoolExecutor(self.tuning.window, thread_name_prefix="model-piece") as executor:
            try:
                for i in range(min(self.tuning.window, len(spans))):
                    futures[i] = executor.submit(self._piece, writer, *spans[i])
                for i in range(len(spans)):
                    received = futures.pop(i).result()
                    following = i + self.tuning.window
                    if following < len(spans):
                        futures[following] = executor.submit(self._piece, writer, *spans[following])
                    try:
                        if received.hashed < received.length:
                            assert received.buffer is not None  # unhashed bytes were buffered
                            writer.write(received.buffer[received.hashed : received.length], written=True)
                    finally:
                        received.release(self.limits.pieces)
            except BaseException:
                self._abandon = True  # running pieces stop at their next chunk
                for future in futures.values():
                    future.cancel()
                raise

    def _piece(self, writer: _Writer, start: int, end: int) -> _Received:
        """Receive ``[start, end)``, writing each chunk at its offset and hashing it at once while
        this piece is the head; a chunk that arrives before the hash reaches the piece goes into
        a pool buffer (taken the first time one must wait)."""
        received = _Received(end - start)
        pool = self.limits.pieces
        hot: list[memoryview] = []  # the head's chunk buffer, once taken
        into_hot = False

        def head() -> bool:  # only this piece's thread moves the hash from here on
            return writer.position == start + received.hashed

        def target(at: int, n: int) -> memoryview:
            nonlocal into_hot
            into_hot = received.hashed == received.filled and head()
            if into_hot:
                if not hot:
                    hot.append(memoryview(pool.take(self.tuning.chunk)))
                return hot[0][:n]
            if received.buffer is None:
                received.buffer = memoryview(pool.take(self.tuning.piece_size))
            return received.buffer[at - start : at - start + n]

        def consume(data: memoryview) -> None:
            _write_at(self._fd, data, start + received.filled)  # in parallel with the other pieces
            received.filled += data.nbytes
            if into_hot:
                writer.write(data, written=True)
            elif head():  # the hash reached this piece: catch up on what waited in the buffer
                assert received.buffer is not None
                writer.write(received.buffer[received.hashed : received.filled], written=True)
            else:
                return
            received.hashed = received.filled

        try:
            self._fetch(start, end, target, consume)
            if received.filled != received.length:
                raise FetchError(d.SOURCE_UNAVAILABLE, "a byte range came back short", retryable=False)
        except BaseException:
            received.release(pool)
            raise
        finally:
            for view in hot:
                pool.give_view(view)
        return received

    def _fetch(
        self,
        start: int,
        end: int,
        target: Callable[[int, int], memoryview],
        consume: Callable[[memoryview], None],
    ) -> None:
        """Receive ``[start, end)`` in chunks: ``target(offset, n)`` is where the bytes at ``offset``
        (at most ``n``) are read into, and ``consume`` is handed each chunk received, in order."""
        position = start
        failures = 0
        cancelled = self._should_stop
        chunk = self.tuning.chunk
        rate = self.limits.rate
        while position < end:
            if cancelled():
                raise _cancel_error()
            progressed = False
            try:
                with self.limits.requests.slot(cancelled) as got:
                    if not got:
                        raise _cancel_error()
                    body = self._open(position, end)
                    with body:
                        while position < end:
                            if cancelled():
                                raise _cancel_error()
                            window = target(position, min(chunk, end - position))
                            n = body.readinto(window)
                            if n == 0:
                                raise FetchError(d.SOURCE_UNAVAILABLE, "the body ended early", retryable=True)
                            rate.take(n, cancelled)
                            consume(window[:n])
                            position += n
                            progressed = True
            except FetchError as error:
                if not error.retryable:
                    raise
                failures = 0 if progressed else failures + 1
                if failures >= self.tuning.retries:
                    raise FetchError(
                        d.SOURCE_UNAVAILABLE, f"a file's byte ranges keep failing ({error.message})"
                    ) from None

    def _open(self, start: int, end: int) -> Body:
        """One range, starting where the file's redirects led before (a signed URL the hub already
        issued, so each further range costs one request, not two); a landing that is refused
        (expired) is forgotten and the range asked of the source again."""
        landing = self._landing
        try:
            body = open_range(
                self.source, start, end, self.entry.size, timeout=self.tuning.stall_timeout, landing=landing
            )
        except FetchError as error:
            if landing is None or error.reason != d.ACCESS_DENIED:
                raise
            self._landing = None
            body = open_range(self.source, start, end, self.entry.size, timeout=self.tuning.stall_timeout)
        if body.landing is not None:
            self._landing = body.landing
        return body

    def _should_stop(self) -> bool:
        return self._abandon or self.cancelled()


class _Received:
    """One piece's bytes: how many arrived, how many of them are hashed, and the buffer holding
    those that arrived before the hash reached the piece (``None`` when none had to wait)."""

    __slots__ = ("buffer", "filled", "hashed", "length")

    def __init__(self, length: int) -> None:
        self.length = length
        self.filled = 0
        self.hashed = 0
        self.buffer: memoryview | None = None

    def release(self, pool: PiecePool) -> None:
        if self.buffer is not None:
            pool.give_view(self.buffer)
            self.buffer = None


class _Writer:
    """Writes verified bytes in order, hashing them, checkpointing every ``checkpoint_bytes``."""

    def __init__(self, fd: int, hasher: ResumableHash, position: int, owner: FileDownload) -> None:
        self.fd = fd
        self.hasher = hasher
        self.position = position
        self.owner = owner
        self.since_checkpoint = 0
        self.since_durable = 0

    def write(self, data: memoryview, *, written: bool = False) -> None:
        """Hash ``data`` (the next bytes in order) and write it, unless a piece already did.

        ``position`` moves last, once the checkpoint is taken: a piece waiting for the hash to
        reach it (``position`` equal to its start) becomes the only writer only when this call
        is over, so two threads never hash or checkpoint at once."""
        after = self.position + data.nbytes
        if after > self.owner.entry.size:
            raise FetchError(d.INTEGRITY_MISMATCH, "a file is larger than the manifest lists")
        self.hasher.update(data)
        if not written:
            _write_at(self.fd, data, self.position)
        self.since_checkpoint += data.nbytes
        self.since_durable += data.nbytes
        self.owner.progress(data.nbytes)
        if self.since_checkpoint >= self.owner.tuning.checkpoint_bytes:
            durable = self.since_durable >= self.owner.tuning.durable_bytes
            self.owner._checkpoint(self.fd, after, self.hasher, durable=durable)
            self.since_checkpoint = 0
            if durable:
                self.since_durable = 0
        self.position = after


def _write_at(fd: int, data: memoryview, offset: int) -> None:
    written = 0
    try:
        while written < data.nbytes:
            written += os.pwrite(fd, data[written:], offset + written)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise FetchError(d.INSUFFICIENT_CAPACITY, "the cache filesystem is full") from None
        raise


_SYNC_FILE_RANGE = getattr(LIBC, "sync_file_range", None)
_SYNC_FILE_RANGE_WRITE = 2
if _SYNC_FILE_RANGE is not None:
    _SYNC_FILE_RANGE.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _SYNC_FILE_RANGE.restype = ctypes.c_int


def _start_writeback(fd: int) -> None:
    """Start writing the file's dirty pages to disk without waiting (``sync_file_range`` with
    ``SYNC_FILE_RANGE_WRITE``), so the disk works while the download goes on instead of all at
    the final sync; the page cache keeps the bytes for the engine that loads them next.  Best
    effort: where the call is missing or refused, the final sync writes everything."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


_BOOT: list[str] = []


def _boot_id() -> str:
    """This boot's id: a checkpoint taken in another boot may name bytes the disk never got."""
    if not _BOOT:
        try:
            _BOOT.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        except OSError:
            _BOOT.append("unknown")
    return _BOOT[0]
