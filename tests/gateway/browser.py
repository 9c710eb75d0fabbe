"""Headless Chromium driven over the DevTools protocol, for the dashboard's browser test and its
benchmark: no new dependency (the protocol's websocket is ``websocket-client``, which the Kubernetes
client already brings) and no downloaded browser (Debian's ``chromium``, installed by
``scripts/ensure-chromium.sh``).

    with Chromium() as browser:
        browser.open("https://127.0.0.1:8443/")
        browser.wait("document.querySelector('main').dataset.revision")
        browser.screenshot(path)

Everything the page logs as an error (an uncaught exception, a refused resource, a CSP violation)
is collected in :attr:`Chromium.errors`.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

# The flags a closed network needs (no background connections, no component updates), and the
# ones a root, GPU-less headless run needs; the gateway's certificate is self-signed.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--ignore-certificate-errors",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


class BrowserError(RuntimeError):
    pass


def binary() -> str | None:
    return os.environ.get("GPUSTACK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, *, width: int = 1440, height: int = 900, executable: str | None = None) -> None:
        found = executable or binary()
        if found is None:
            raise BrowserError("no chromium on PATH: run scripts/ensure-chromium.sh")
        self.executable = found
        self.width = width
        self.height = height
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        self._profile = Path(tempfile.mkdtemp(prefix="gpustack-chromium-"))
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: websocket.WebSocket | None = None

    # Starting and stopping ----------------------------------------------------------------------

    def __enter__(self) -> Chromium:
        self.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def start(self) -> None:
        argv = [
            self.executable,
            *FLAGS,
            f"--user-data-dir={self._profile}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        log = (self._profile / "chromium.log").open("wb")
        self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(
                    f"chromium did not start: {(self._profile / 'chromium.log').read_text()[-2000:]}"
                )
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self._socket = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True
        )
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):
                self.send("Browser.close")
            with contextlib.suppress(Exception):
                self._socket.close()
            self._socket = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=10)
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        shutil.rmtree(self._profile, ignore_errors=True)

    # The protocol -------------------------------------------------------------------------------

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile are kept)."""
        assert self._socket is not None, "start() first"
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method = message.get("method", "")
        params = message.get("params") or {}
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails") or {}
            text = (details.get("exception") or {}).get("description") or details.get("text")
            self.errors.append(f"exception: {text}")
        elif method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url') or ''}".strip())
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append("console: " + " ".join(str(a.get("value")) for a in params.get("args") or []))
        self._events.append(message)
        del self._events[:-200]

    def pump(self, seconds: float = 0.0) -> None:
        """Read events for up to ``seconds`` (collects errors between commands)."""
        assert self._socket is not None
        self._socket.settimeout(max(seconds, 0.001))
        try:
            while True:
                self._event(json.loads(self._socket.recv()))
        except (websocket.WebSocketTimeoutException, TimeoutError):
            pass
        finally:
            self._socket.settimeout(60)

    # What a test does ---------------------------------------------------------------------------

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait for the load event."""
        self._events.clear()
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self._events):
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not load within {timeout}s")
            self.pump(0.1)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited); JSON-compatible values only."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails'].get('text')}")
        return (result.get("result") or {}).get("value")

    def wait(self, expression: str, timeout: float = 10, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout}s waiting for {what or expression}")
            self.pump(0.05)

    def dark(self, on: bool = True) -> None:
        """Emulate ``prefers-color-scheme: dark`` (or light)."""
        features = [{"name": "prefers-color-scheme", "value": "dark" if on else "light"}]
        self.send("Emulation.setEmulatedMedia", features=features)

    def press(self, key: str = "Tab", *, shift: bool = False) -> None:
        codes = {"Tab": 9, "Enter": 13, " ": 32}
        modifiers = 8 if shift else 0
        for kind in ("keyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code="Space" if key == " " else key,
                windowsVirtualKeyCode=codes.get(key, 0),
                modifiers=modifiers,
            )

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate(
                "[document.documentElement.scrollWidth, Math.min(document.documentElement.scrollHeight, 8000)]"
            )
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
