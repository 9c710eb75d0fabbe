"""api.ssh: an InstanceSSHPublicKey's line parses as sshd would read it, or says why not."""

from __future__ import annotations

import base64
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from api import ssh


def _openssh(key) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


ED25519 = _openssh(ed25519.Ed25519PrivateKey.generate())
RSA_3072 = _openssh(rsa.generate_private_key(public_exponent=65537, key_size=3072))
ECDSA_384 = _openssh(ec.generate_private_key(ec.SECP384R1()))


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _line(key_type: str, *fields: bytes) -> str:
    blob = _string(key_type.encode()) + b"".join(_string(f) for f in fields)
    return f"{key_type} {base64.b64encode(blob).decode()}"


@pytest.mark.parametrize("line", [ED25519, RSA_3072, ECDSA_384], ids=["ed25519", "rsa", "ecdsa"])
def test_keys_ssh_keygen_writes_parse(line: str) -> None:
    key = ssh.parse(f"{line} alice@laptop\n")
    assert key.type == line.split()[0]
    assert key.comment == "alice@laptop"
    assert key.line == f"{line} alice@laptop"
    assert key.fingerprint.startswith("SHA256:") and "=" not in key.fingerprint


def test_security_key_carries_its_application() -> None:
    line = _line(ssh.SK_ED25519, b"k" * 32, b"ssh:")
    assert ssh.parse(line).type == ssh.SK_ED25519
    with pytest.raises(ssh.KeyLineError, match="application"):
        ssh.parse(_line(ssh.SK_ED25519, b"k" * 32, b""))


REFUSALS = [
    ("ssh-ed25519 <paste-your-public-key-here>", "not base64"),  # the seed's placeholder
    ("", "is empty"),
    ("   \n", "is empty"),
    (42, "must be a string"),
    ("ssh-ed25519", "no base64 key"),
    ('command="ls" ' + ED25519, "not a key type"),  # authorized_keys options are refused
    ("ssh-dss AAAAB3NzaC1kc3M=", "not a key type"),
    (ED25519 + "\n" + ED25519, "several lines"),
    ("ssh-rsa " + ED25519.split()[1], "says 'ssh-ed25519' but the line says 'ssh-rsa'"),
    (_line("ssh-ed25519", b"short"), "32 bytes"),
    (_line("ssh-ed25519", b"k" * 32, b"extra"), "trailing"),
    (_line("ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xff" * 64), "512 bits"),
    (_line("ssh-rsa", b"\x01\x00\x01"), "ends before its modulus"),
    (_line("ecdsa-sha2-nistp256", b"nistp384", b"\x04" + b"x" * 64), "not nistp256"),
    (_line("ecdsa-sha2-nistp256", b"nistp256", b"\x02" + b"x" * 32), "uncompressed point"),
    ("ssh-ed25519 " + "A" * 20000, "at most"),
]


# Named by what they must say: some lines hold a key generated at import, and pytest-xdist's
# workers must collect the same test ids.
@pytest.mark.parametrize(("text", "fragment"), REFUSALS, ids=[fragment for _, fragment in REFUSALS])
def test_refusals_say_why(text: object, fragment: str) -> None:
    with pytest.raises(ssh.KeyLineError) as caught:
        ssh.parse(text)
    assert fragment in str(caught.value)


def test_truncated_blob_is_refused_not_crashed() -> None:
    blob = base64.b64decode(ED25519.split()[1])
    for cut in range(1, len(blob)):
        truncated = f"ssh-ed25519 {base64.b64encode(blob[:cut]).decode()}"
        with pytest.raises(ssh.KeyLineError):
            ssh.parse(truncated)
