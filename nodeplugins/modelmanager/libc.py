"""The C library, loaded once, for the system calls the plugin makes directly (``mount`` and
``umount2`` in mounts.py, ``sync_file_range`` in download.py)."""

from __future__ import annotations

import ctypes
import ctypes.util

LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
