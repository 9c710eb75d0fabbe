"""Hashes whose state can be saved and restored, so a resumed file continues verifying from where it
stopped instead of reading back what is already on disk (model-delivery spec §4.5 step 4).

``hashlib`` cannot export its state; OpenSSL's low-level ``SHA256_CTX``/``SHA_CTX`` are plain
structs whose bytes are the state. They are reached through ``ctypes`` (the call releases the GIL,
so parallel files hash in parallel). The saved state is tied to this machine's libcrypto build; a
state that does not fit (another struct size, another library) is refused, and the file restarts
from its first byte — never verified from a guess.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from typing import Literal

Algo = Literal["sha256", "gitsha1"]
_CTX_SIZE = {"sha256": 112, "gitsha1": 96}
_DIGEST_SIZE = {"sha256": 32, "gitsha1": 20}
_FUNCS = {"sha256": "SHA256", "gitsha1": "SHA1"}


def _load() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("crypto")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        for prefix in _FUNCS.values():
            for suffix, args in (
                ("_Init", [ctypes.c_void_p]),
                ("_Final", [ctypes.c_void_p, ctypes.c_void_p]),
            ):
                fn = getattr(lib, prefix + suffix)
                fn.argtypes, fn.restype = args, ctypes.c_int
            update = getattr(lib, prefix + "_Update")
            update.argtypes, update.restype = (
                [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t],
                ctypes.c_int,
            )
        lib.OpenSSL_version_num.restype = ctypes.c_ulong
    except (OSError, AttributeError):
        return None
    return lib


_LIB = _load()
_TAG = b"openssl-%x:" % (_LIB.OpenSSL_version_num() if _LIB else 0)


class ResumableHash:
    """``sha256`` of the bytes, or the git blob SHA-1 (``"blob <size>\\0"`` then the bytes)."""

    def __init__(self, algo: Algo, size: int, *, _state: bytes | None = None) -> None:
        if algo not in _CTX_SIZE:
            raise ValueError(f"unknown hash {algo}")
        self.algo = algo
        self.size = size
        self._fallback: hashlib._Hash | None = None
        if _LIB is None:
            self._fallback = hashlib.new("sha256" if algo == "sha256" else "sha1")
            if algo == "gitsha1":
                self._fallback.update(b"blob %d\0" % size)
            return
        self._ctx = ctypes.create_string_buffer(_CTX_SIZE[algo])
        prefix = _FUNCS[algo]
        self._update = getattr(_LIB, prefix + "_Update")
        self._final = getattr(_LIB, prefix + "_Final")
        if _state is not None:
            ctypes.memmove(self._ctx, _state, len(_state))
            return
        getattr(_LIB, prefix + "_Init")(self._ctx)
        if algo == "gitsha1":
            self.update(b"blob %d\0" % size)

    @property
    def resumable(self) -> bool:
        return self._fallback is None

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self._fallback is not None:
            self._fallback.update(data)
            return
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if not n:
            return
        if isinstance(data, memoryview) and data.readonly:
            data = data.tobytes()
        if isinstance(data, bytes):
            self._update(self._ctx, data, n)
        else:
            self._update(self._ctx, ctypes.addressof((ctypes.c_char * n).from_buffer(data)), n)

    def hexdigest(self) -> str:
        if self._fallback is not None:
            return self._fallback.hexdigest()
        copy = ctypes.create_string_buffer(self._ctx.raw, len(self._ctx))
        out = ctypes.create_string_buffer(_DIGEST_SIZE[self.algo])
        self._final(out, copy)
        return out.raw.hex()

    def state(self) -> bytes | None:
        """The saved state, or None where it cannot be saved (no libcrypto)."""
        return None if self._fallback is not None else _TAG + self._ctx.raw

    @classmethod
    def restore(cls, algo: Algo, size: int, state: bytes) -> ResumableHash | None:
        """The hash continued from ``state``, or None when ``state`` is not one this machine wrote."""
        if _LIB is None or algo not in _CTX_SIZE or not state.startswith(_TAG):
            return None
        raw = state[len(_TAG) :]
        if len(raw) != _CTX_SIZE[algo]:
            return None
        return cls(algo, size, _state=raw)
