"""Read-only bind mounts and the node's mount table (model-delivery spec §4.5, §7 item 20).

A read-only bind mount takes two calls: ``mount(src, target, MS_BIND)`` then
``mount(target, MS_BIND|MS_REMOUNT|MS_RDONLY)`` — a single bind with ``MS_RDONLY`` is silently a
writable view of the shared cache. References are rebuilt on restart from ``/proc/self/mountinfo``:
a mount whose source is ``…/v1/trees/<hex>/model`` on the cache's device is a reference to that
digest, whatever the ledger says.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from nodeplugins.modelmanager.libc import LIBC

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MNT_DETACH = 2
_TREE_ROOT = re.compile(r"/v1/trees/([0-9a-f]{64})/model$")
LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
LIBC.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class MountError(OSError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise MountError(code, f"{what}: {os.strerror(code)}")


def bind_read_only(source: Path, target: Path) -> None:
    """Bind ``source`` at ``target``, then remount it read-only (undone if the second step fails)."""
    src, dst = os.fsencode(source), os.fsencode(target)
    _check(LIBC.mount(src, dst, None, MS_BIND, None), "bind mount")
    try:
        _check(LIBC.mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None), "read-only remount")
    except MountError:
        LIBC.umount2(dst, MNT_DETACH)
        raise


def unmount(target: Path) -> bool:
    """Unmount ``target``; False when it was not mounted."""
    result = LIBC.umount2(os.fsencode(target), 0)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOENT):
        return False
    if code == errno.EBUSY:
        _check(LIBC.umount2(os.fsencode(target), MNT_DETACH), "lazy unmount")
        return True
    raise MountError(code, f"unmount: {os.strerror(code)}")


@dataclass(frozen=True, slots=True)
class Mount:
    device: str  # "major:minor"
    root: str  # the path inside the source filesystem
    point: str  # where it is mounted
    options: str  # per-mount options: "ro,..." or "rw,..."

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) < 7:
            continue
        mounts.append(Mount(parts[2], _unescape(parts[3]), _unescape(parts[4]), parts[5]))
    return mounts


def read_mountinfo(path: str = "/proc/self/mountinfo") -> list[Mount]:
    with open(path) as f:
        return parse_mountinfo(f.read())


def device_of(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def mounted_at(mounts: list[Mount], target: Path) -> Mount | None:
    wanted = os.path.normpath(str(target))
    found = None
    for mount in mounts:
        if mount.point == wanted:
            found = mount  # the last one listed is the one on top
    return found


def tree_references(mounts: list[Mount], cache_device: str, kubelet_dir: Path) -> dict[str, str]:
    """``{target: digest}`` for every bind of a published tree under kubelet's directory."""
    base = os.path.normpath(str(kubelet_dir)) + "/"
    out = {}
    for mount in mounts:
        match = _TREE_ROOT.search(mount.root)
        if match and mount.device == cache_device and mount.point.startswith(base):
            out[mount.point] = "sha256:" + match[1]
    return out


def mounted_digest(mounts: list[Mount], target: Path, cache_device: str) -> str | None:
    mount = mounted_at(mounts, target)
    if mount is None or mount.device != cache_device:
        return None
    match = _TREE_ROOT.search(mount.root)
    return "sha256:" + match[1] if match else None
