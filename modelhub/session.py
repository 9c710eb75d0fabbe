"""The HTTP client ``huggingface_hub`` uses, built from a :class:`HubConnection`.

``huggingface_hub`` shares one ``httpx2.Client`` per process, made by a factory; :func:`use`
installs a factory for the connection and replaces the shared client only when the connection
changed. The client never reads the environment (``trust_env=False``: no ambient proxy or netrc),
routes each request through the proxy unless its host is on the no-proxy list, trusts the extra
CA, and follows redirects (httpx drops ``Authorization`` on a redirect to another origin).
"""

from __future__ import annotations

import logging
import threading

import httpx2
from huggingface_hub import set_client_factory
from huggingface_hub.utils._http import hf_request_event_hook

from modelhub.connection import HubConnection, bypasses_proxy

TIMEOUT = httpx2.Timeout(30.0, connect=10.0)
_lock = threading.Lock()
_installed: HubConnection | None = None

# huggingface_hub logs request URLs at DEBUG; a redirect target may be a signed URL. Keep it quiet
# whatever the process's root level is.
logging.getLogger("huggingface_hub").setLevel(logging.WARNING)
logging.getLogger("httpx2").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)


class RoutingTransport(httpx2.BaseTransport):
    """Direct or through the proxy, decided per request by the no-proxy list."""

    def __init__(self, connection: HubConnection) -> None:
        self.no_proxy = connection.no_proxy
        context = connection.ssl_context
        self.direct = httpx2.HTTPTransport(verify=context, trust_env=False)
        self.proxied = (
            httpx2.HTTPTransport(verify=context, trust_env=False, proxy=connection.https_proxy)
            if connection.https_proxy
            else None
        )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.proxied is not None and not bypasses_proxy(request.url.host, self.no_proxy):
            return self.proxied.handle_request(request)
        return self.direct.handle_request(request)

    def close(self) -> None:
        self.direct.close()
        if self.proxied is not None:
            self.proxied.close()


def client_for(connection: HubConnection) -> httpx2.Client:
    return httpx2.Client(
        transport=RoutingTransport(connection),
        event_hooks={"request": [hf_request_event_hook]},
        follow_redirects=True,
        timeout=TIMEOUT,
        trust_env=False,
    )


def use(connection: HubConnection) -> None:
    """Make ``huggingface_hub`` reach the hub through ``connection`` (a no-op when it already does)."""
    global _installed
    with _lock:
        if _installed == connection:
            return
        set_client_factory(lambda: client_for(connection))
        _installed = connection
