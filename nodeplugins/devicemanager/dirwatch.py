"""Wake on entries created in or removed from one directory (Linux inotify, through libc).

The device manager's kubelet link waits on the kubelet's ``device-plugins/`` directory: a
restarted kubelet creates a new ``kubelet.sock`` there and wipes the plugin sockets, and it
re-admits the Pods already on the node within about a second of starting. A Pod holding a device
whose plugin has not registered again by then is refused (``OutOf<resource>``, capacity 0) and
stopped. Polling once a second loses that race under load; an inotify wake registers within
milliseconds of the new socket.

Where inotify is unavailable (another kernel, the instance limit reached) :meth:`wait` sleeps its
timeout, and the caller's poll is the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import struct
from pathlib import Path

log = logging.getLogger(__name__)

IN_CREATE = 0x100
IN_DELETE = 0x200
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_IGNORED = 0x8000  # the watch was removed (its directory deleted or moved)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF


class DirectoryEvents:
    """``wait(timeout)`` returns True as soon as an entry of ``directory`` is created, removed or
    renamed (or ``wake()`` is called), False when ``timeout`` passes without one."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._fd: int | None = None
        self._watching = False

    def _ensure_watch(self) -> None:
        """Watch the directory once it exists (it may be created after this object, or removed and
        created again by a kubelet reinstall)."""
        libc = _libc()
        if self._watching or libc is None:
            return
        if self._fd is None:
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                log.warning("inotify unavailable; polling", extra={"errno": ctypes.get_errno()})
                return
            self._fd = fd
        if libc.inotify_add_watch(self._fd, os.fsencode(self.directory), _MASK) >= 0:
            self._watching = True

    def wait(self, timeout: float) -> bool:
        self._ensure_watch()
        fds = [self._wake_r] + ([self._fd] if self._watching and self._fd is not None else [])
        ready, _, _ = select.select(fds, [], [], timeout)
        for fd in ready:
            data = _drain(fd)
            if fd == self._fd and _watch_removed(data):
                self._watching = False  # the watch went with the directory: add it again next time
        return bool(ready)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = None
        self._watching = False


def _drain(fd: int) -> bytes:
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _watch_removed(events: bytes) -> bool:
    offset = 0
    while offset + _EVENT.size <= len(events):
        _, mask, _, length = _EVENT.unpack_from(events, offset)
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            return True
        offset += _EVENT.size + length
    return False


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError):
            return None
        _LIBC = libc
    return _LIBC
