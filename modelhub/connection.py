"""How a hub is reached: endpoint, HTTPS proxy, no-proxy list and extra CA certificates.

The same value drives the worker's resolution (Settings ``model-artifact-*``) and the node plugin's
downloads (``NodeModelStore.spec.hub`` plus the CA ConfigMap), and both re-check it with
:meth:`HubConnection.problem` before use: an invalid one is ``InvalidRequest`` for the plugin and
never reaches the network.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

from cryptography import x509

from api.settings import host_list, http_url, proxy_url


@dataclass(frozen=True)
class HubConnection:
    endpoint: str
    https_proxy: str = ""
    no_proxy: str = ""
    ca_pem: str = ""  # PEM certificates trusted besides the system's (the CA ConfigMap's ca.crt)

    @property
    def base(self) -> str:
        return self.endpoint.rstrip("/")

    def problem(self) -> str | None:
        """What makes this connection unusable, naming the part, or None."""
        if not self.endpoint:
            return "the hub endpoint is empty"
        bad = http_url(self.endpoint)
        if bad:
            return f"the hub endpoint {bad}"
        bad = proxy_url(self.https_proxy)
        if bad:
            return f"the HTTPS proxy {bad}"
        bad = host_list(self.no_proxy)
        if bad:
            return f"the no-proxy list {bad}"
        if self.ca_pem:
            try:
                if not x509.load_pem_x509_certificates(self.ca_pem.encode()):
                    return "the CA bundle holds no certificate"
                self.ssl_context  # noqa: B018  (loads them into OpenSSL, which may refuse one)
            except (ValueError, ssl.SSLError):
                return "the CA bundle is not a list of PEM certificates"
        return None

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.ca_pem:
            context.load_verify_locations(cadata=self.ca_pem)
        return context

    def proxy_for(self, url: str) -> str | None:
        """The proxy a request to ``url`` goes through, or None (no proxy, or bypassed)."""
        if not self.https_proxy:
            return None
        host = urlsplit(url).hostname or ""
        return None if bypasses_proxy(host, self.no_proxy) else self.https_proxy


def bypasses_proxy(host: str, no_proxy: str) -> bool:
    """Whether ``host`` is on the ``NO_PROXY``-style list: ``*``, a host, a domain (``.example.com``
    or ``example.com`` also matches its subdomains), an IP address or a CIDR block."""
    host = host.strip("[]").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                if address is not None and address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        entry = entry.strip("[]")
        if entry.count(":") == 1 and not entry.startswith("["):  # host:port — the port is not judged
            entry = entry.split(":", 1)[0]
        domain = entry.lstrip(".").lstrip("*").lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False
