"""Confined, capped sysfs reads: the one place the RDMA inventory touches the sysfs tree.

A sysfs path is a chain of symlinks.  :meth:`Sysfs.resolve` follows it one component at a time and
refuses, before touching anything there, a step that would leave the root (an absolute link
elsewhere, or ``..`` above the root); the path is never followed out.  :meth:`Sysfs.read` reads at
most 64 KiB + 1 bytes of a regular file and refuses anything larger, so a huge attribute is never
read whole.  Every answer is three-valued, because the callers must keep them apart (C.10 (1)):

- the value (a :class:`~pathlib.Path` inside the root, text, or a directory listing);
- ``None`` — the path does not exist (an absence is a fact: e.g. no ``infiniband`` directory);
- :class:`Unreadable` — it exists, or may, but could not be read (refused, permission, I/O).

Each refusal is logged once per path and reason (a pass runs every few seconds).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("devicemanager.rdma.sysfs")

ATTRIBUTE_CAP = 64 * 1024  # bytes; a larger attribute is refused, never read whole
MAX_SYMLINK_HOPS = 40  # as the kernel's own limit on a path walk


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A path that exists (or may) and could not be read: ``path`` relative to the root, and why."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


class Sysfs:
    """A sysfs tree at ``root`` (``/sys`` on a node; a tree a test built elsewhere)."""

    def __init__(self, root: str | Path = "/sys") -> None:
        self.root = Path(os.path.realpath(root))
        self._root = str(self.root)
        self._prefix = self._root.rstrip("/") + "/"
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    # --- paths ----------------------------------------------------------------------------------
    def _inside(self, path: str) -> bool:
        return path == self._root or path.startswith(self._prefix)

    def _refuse(self, rel: str, why: str, *, level: int = logging.WARNING) -> Unreadable:
        key = (rel, why)
        with self._lock:
            first = key not in self._logged
            self._logged.add(key)
        if first:
            log.log(level, "sysfs read refused", extra={"path": rel, "reason": why, "root": self._root})
        return Unreadable(rel, why)

    def _shown(self, path: str) -> str:
        return path[len(self._prefix) :] if path.startswith(self._prefix) else "."

    def resolve(self, rel: str | Path) -> Path | Unreadable | None:
        """The real path of ``rel`` (relative to the root, or an absolute path inside it)."""
        found = self._resolve(os.fspath(rel))
        return Path(found) if isinstance(found, str) else found

    def _resolve(self, given: str) -> str | Unreadable | None:
        # Strings and os.path, not pathlib: a pass resolves thousands of paths.
        if given.startswith("/"):
            normal = os.path.normpath(given)
            if not self._inside(normal):
                return self._refuse(given, "outside the sysfs root", level=logging.ERROR)
            given = normal[len(self._prefix) :] if normal != self._root else ""
        shown = given
        pending = [p for p in given.split("/") if p not in ("", ".")]
        pending.reverse()  # a stack: the next component is last
        current = self._root
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if current == self._root:
                    return self._refuse(shown, "a symlink leaves the sysfs root", level=logging.ERROR)
                current = os.path.dirname(current)
                continue
            candidate = f"{current}/{part}"
            try:
                info = os.lstat(candidate)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as error:
                return self._refuse(shown, f"cannot stat {self._shown(candidate)}: {error.strerror}")
            if not stat.S_ISLNK(info.st_mode):
                current = candidate
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return self._refuse(shown, "too many symlinks", level=logging.ERROR)
            try:
                target = os.readlink(candidate)
            except OSError as error:
                return self._refuse(shown, f"cannot read the link {self._shown(candidate)}: {error.strerror}")
            if target.startswith("/"):
                absolute = os.path.normpath(target)
                if not self._inside(absolute):
                    return self._refuse(
                        shown,
                        f"the symlink {self._shown(candidate)} points outside the sysfs root ({target})",
                        level=logging.ERROR,
                    )
                current = self._root
                target = absolute[len(self._prefix) :] if absolute != self._root else ""
            pending.extend(reversed(target.split("/")))
        return current

    # --- reads ----------------------------------------------------------------------------------
    def read(self, rel: str | Path) -> str | Unreadable | None:
        """An attribute's text, stripped; at most :data:`ATTRIBUTE_CAP` bytes are ever read."""
        path = self._resolve(os.fspath(rel))
        if path is None or isinstance(path, Unreadable):
            return path
        shown = self._shown(path)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as error:
            return self._refuse(shown, f"cannot stat: {error.strerror}")
        if not stat.S_ISREG(info.st_mode):
            return self._refuse(shown, "not a regular file")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENOENT:
                return None
            return self._refuse(shown, f"cannot open: {error.strerror}")
        try:
            data = b""
            while len(data) <= ATTRIBUTE_CAP:
                chunk = os.read(fd, ATTRIBUTE_CAP + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        except OSError as error:
            return self._refuse(shown, f"cannot read: {error.strerror}")
        finally:
            os.close(fd)
        if len(data) > ATTRIBUTE_CAP:
            return self._refuse(
                shown, f"larger than {ATTRIBUTE_CAP // 1024} KiB: refused, not read", level=logging.ERROR
            )
        return data.decode("utf-8", errors="replace").strip()

    def listdir(self, rel: str | Path) -> list[str] | Unreadable | None:
        """A directory's entries, sorted (sysfs order is not stable)."""
        path = self._resolve(os.fspath(rel))
        if path is None or isinstance(path, Unreadable):
            return path
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return None
        except OSError as error:
            return self._refuse(self._shown(path), f"cannot list: {error.strerror}")

    def exists(self, rel: str | Path) -> bool:
        return isinstance(self._resolve(os.fspath(rel)), str)
