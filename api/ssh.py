"""The OpenSSH public key line an ``InstanceSSHPublicKey`` carries, parsed as ``sshd`` would read it
from an ``authorized_keys`` file: ``<key type> <base64 key blob> [comment]``.

The blob is decoded and walked field by field (RFC 4253 §6.6, RFC 5656 §3.1, RFC 8709 §4 and the
OpenSSH ``PROTOCOL.u2f`` security-key formats): the type written inside must equal the type named
in front, every field must be present, and nothing may trail.  ``authorized_keys`` options
(``command="…"``, ``from="…"``) are not accepted: the sidecar decides what a login runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

ED25519 = "ssh-ed25519"
RSA = "ssh-rsa"
SK_ED25519 = "sk-ssh-ed25519@openssh.com"
SK_ECDSA = "sk-ecdsa-sha2-nistp256@openssh.com"
ECDSA_CURVES = {
    "ecdsa-sha2-nistp256": ("nistp256", 65),
    "ecdsa-sha2-nistp384": ("nistp384", 97),
    "ecdsa-sha2-nistp521": ("nistp521", 133),
}
KEY_TYPES = (ED25519, RSA, *ECDSA_CURVES, SK_ED25519, SK_ECDSA)
MIN_RSA_BITS = 1024  # what sshd's RequiredRSASize accepts by default
MAX_LINE = 16 * 1024


class KeyLineError(ValueError):
    """The text is not one OpenSSH public key line; the message says why and what is expected."""


@dataclass(frozen=True, slots=True)
class PublicKey:
    type: str
    blob: bytes
    comment: str

    @property
    def fingerprint(self) -> str:
        """``SHA256:<base64>``, as ``ssh-keygen -l`` prints it."""
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"

    @property
    def line(self) -> str:
        """The canonical ``authorized_keys`` line."""
        text = f"{self.type} {base64.b64encode(self.blob).decode()}"
        return f"{text} {self.comment}" if self.comment else text


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def string(self, what: str) -> bytes:
        if self.at + 4 > len(self.data):
            raise KeyLineError(f"the key blob ends before its {what}")
        (length,) = struct.unpack(">I", self.data[self.at : self.at + 4])
        start = self.at + 4
        if start + length > len(self.data):
            raise KeyLineError(f"the key blob ends inside its {what}")
        self.at = start + length
        return self.data[start : self.at]

    def done(self) -> None:
        if self.at != len(self.data):
            raise KeyLineError(f"the key blob has {len(self.data) - self.at} unexpected trailing bytes")


def _mpint_bits(value: bytes) -> int:
    stripped = value.lstrip(b"\0")
    return len(stripped) * 8 - (8 - stripped[0].bit_length()) if stripped else 0


def _walk(key_type: str, blob: bytes) -> None:
    reader = _Reader(blob)
    inner = reader.string("key type")
    if inner != key_type.encode():
        raise KeyLineError(
            f"the key blob says {inner.decode(errors='replace')!r} but the line says {key_type!r}; "
            "paste the line exactly as ssh-keygen wrote it"
        )
    if key_type in (ED25519, SK_ED25519):
        if len(reader.string("public key")) != 32:
            raise KeyLineError("an Ed25519 public key is 32 bytes")
    elif key_type == RSA:
        exponent = reader.string("exponent")
        modulus = reader.string("modulus")
        if not exponent.strip(b"\0"):
            raise KeyLineError("the RSA exponent is zero")
        if _mpint_bits(modulus) < MIN_RSA_BITS:
            raise KeyLineError(
                f"the RSA key has {_mpint_bits(modulus)} bits; sshd needs at least {MIN_RSA_BITS}"
            )
    else:
        curve_type = key_type if key_type in ECDSA_CURVES else "ecdsa-sha2-nistp256"
        curve, point_size = ECDSA_CURVES[curve_type]
        if reader.string("curve name") != curve.encode():
            raise KeyLineError(f"the curve inside the key blob is not {curve}")
        point = reader.string("public point")
        if len(point) != point_size or point[0] != 4:
            raise KeyLineError(f"the {curve} public point is not an uncompressed point of {point_size} bytes")
    if key_type in (SK_ED25519, SK_ECDSA) and not reader.string("application"):
        raise KeyLineError("a security-key public key names its application (e.g. ssh:)")
    reader.done()


def parse(text: object) -> PublicKey:
    """The key in ``text`` (one line; a trailing newline is fine), or :class:`KeyLineError`."""
    if not isinstance(text, str):
        raise KeyLineError("must be a string holding one OpenSSH public key line")
    if len(text) > MAX_LINE:
        raise KeyLineError(f"is {len(text)} characters; one public key line is at most {MAX_LINE}")
    line = text.strip()
    if "\n" in line or "\r" in line:
        raise KeyLineError("holds several lines; give one public key per InstanceSSHPublicKey")
    parts = line.split(None, 2)
    if not parts:
        raise KeyLineError("is empty; paste the contents of your public key file, e.g. ~/.ssh/id_ed25519.pub")
    key_type = parts[0]
    if key_type not in KEY_TYPES:
        raise KeyLineError(
            f"starts with {key_type[:64]!r}, not a key type sshd accepts ({', '.join(KEY_TYPES)}); "
            "paste the contents of your public key file, e.g. ~/.ssh/id_ed25519.pub"
        )
    if len(parts) < 2:
        raise KeyLineError(f"has a key type but no base64 key after {key_type!r}")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise KeyLineError(
            "the second field is not base64; paste the contents of your public key file, "
            "e.g. ~/.ssh/id_ed25519.pub"
        ) from None
    _walk(key_type, blob)
    return PublicKey(key_type, blob, parts[2] if len(parts) > 2 else "")
