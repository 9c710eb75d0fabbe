"""A TLS server context whose certificate is reloaded from disk when the files change.

``certs`` rotates the serving certificate by replacing the files; the server notices within
``interval`` seconds and loads the new pair into the same context, so new connections get the new
certificate and no admission fails during a rotation.  The reload runs on the event loop thread,
the thread that performs the handshakes, so it never races one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from pathlib import Path

log = logging.getLogger("certs.tls")

# The context this process serves with, set when the server's config loads; watched by the app.
ACTIVE: ReloadingContext | None = None
WATCH_INTERVAL = 5.0  # seconds between looks at the files


class ReloadingContext:
    def __init__(self, cert_file: str | Path, key_file: str | Path) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.set_alpn_protocols(["http/1.1"])
        self._fingerprint = b""
        self.reload()

    def _read_fingerprint(self) -> bytes:
        digest = hashlib.sha256()
        digest.update(self.cert_file.read_bytes())
        digest.update(self.key_file.read_bytes())
        return digest.digest()

    def reload(self) -> bool:
        """Load the pair if it changed since the last load; True when a new one was loaded."""
        fingerprint = self._read_fingerprint()
        if fingerprint == self._fingerprint:
            return False
        self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
        self._fingerprint = fingerprint
        return True

    async def watch(self, interval: float | None = None) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL if interval is None else interval)
            try:
                if self.reload():
                    log.info("serving certificate reloaded", extra={"cert": str(self.cert_file)})
            except (OSError, ssl.SSLError) as error:
                # A half-written pair during a rotation: keep serving the old one, try again.
                log.warning("serving certificate not reloaded", extra={"error": str(error)})
