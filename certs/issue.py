"""Issue and rotate the webhook CA and serving certificate with ``cryptography``.

Files in the certificate directory: ``ca.crt``/``ca.key`` (the CA, kept across rotations so the
caBundle the apiserver trusts stays valid) and ``tls.crt``/``tls.key`` (the serving pair the server
reloads).  Files are written to a temporary name and renamed, so a reader never sees half a pair's
file; the key is renamed before the certificate, and the server only reloads when both changed
bytes parse together.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class Paths:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the apiserver may use to reach a Service-backed webhook."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(common_name: str = "gpustack-operator-webhook-ca") -> tuple[bytes, bytes]:
    """A fresh CA: (certificate PEM, key PEM)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue_ca(paths: Paths, common_name: str = "gpustack-operator-webhook-ca") -> None:
    cert, key = new_ca(common_name)
    paths.directory.mkdir(parents=True, exist_ok=True)
    _write(paths.ca_key, key, 0o600)
    _write(paths.ca_cert, cert, 0o644)


def new_serving(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: list[str],
    ips: list[str],
    validity: dt.timedelta = SERVING_VALIDITY,
    *,
    origin: str = "the CA key",
) -> tuple[bytes, bytes]:
    """A serving certificate signed by the CA: (certificate PEM, key PEM)."""
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{origin}: the CA key is not the EC key this tool issues")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    key = _key()
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    subject = dns_names[0] if dns_names else (ips[0] if ips else "gpustack-operator-webhook")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue_serving(
    paths: Paths, dns_names: list[str], ips: list[str], validity: dt.timedelta = SERVING_VALIDITY
) -> x509.Certificate:
    cert, key = new_serving(
        paths.ca_cert.read_bytes(),
        paths.ca_key.read_bytes(),
        dns_names,
        ips,
        validity,
        origin=str(paths.ca_key),
    )
    _write(paths.key, key, 0o600)
    _write(paths.cert, cert, 0o644)
    return x509.load_pem_x509_certificate(cert)


def remaining(path: Path) -> dt.timedelta | None:
    """Time left before the certificate at ``path`` expires; None when absent or unreadable."""
    try:
        return remaining_pem(path.read_bytes())
    except OSError:
        return None


def remaining_pem(pem: bytes) -> dt.timedelta | None:
    """Time left before a PEM certificate expires; None when it does not parse."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    return cert.not_valid_after_utc - _now()


def sans_of(path: Path) -> tuple[set[str], set[str]]:
    return sans_of_pem(path.read_bytes())


def sans_of_pem(pem: bytes) -> tuple[set[str], set[str]]:
    cert = x509.load_pem_x509_certificate(pem)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(ext.get_values_for_type(x509.DNSName)), {
        str(i) for i in ext.get_values_for_type(x509.IPAddress)
    }


def ensure(
    directory: str | Path,
    dns_names: list[str],
    ips: list[str],
    rotate_before: dt.timedelta = dt.timedelta(days=30),
) -> str:
    """Make the directory hold a valid CA and serving pair; re-issue the serving pair when it
    expires within ``rotate_before`` or its SANs differ.  Returns what was done."""
    paths = Paths(Path(directory))
    actions = []
    ca_left = remaining(paths.ca_cert)
    if ca_left is None or not paths.ca_key.is_file() or ca_left < rotate_before:
        issue_ca(paths)
        actions.append("issued CA")
    left = remaining(paths.cert)
    want = (set(dns_names), set(ips))
    if (
        "issued CA" in actions
        or left is None
        or left < rotate_before
        or not paths.key.is_file()
        or sans_of(paths.cert) != want
    ):
        issue_serving(paths, dns_names, ips)
        actions.append("issued serving certificate")
    return ", ".join(actions) or "certificates valid"


def ca_bundle(directory: str | Path) -> bytes:
    return Paths(Path(directory)).ca_cert.read_bytes()
