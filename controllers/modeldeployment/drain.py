"""Draining a managed replica before it stops (model-deployment.md §9.7).

A managed role's ``main`` container gets ``terminationGracePeriodSeconds = G`` (default 30) and a
``preStop`` hook run by the engine image's own ``python3``: wait 5 s for routing to stop sending, then
read the engine's gauges every second and return on the **second** idle read.  No read starts after
``G − 5`` s; each read is bounded to 2 s; a refused connection, an HTTP error or a TLS failure ends
the hook (nothing left to drain through); a timeout or an unparsable page counts as busy.
``urlopen`` hands a refusal or a TLS failure met while connecting over wrapped in ``URLError``
(its ``reason`` is the refusal), and one met while reading the body bare: both end the hook, while
a ``URLError`` of any other cause (a timeout while connecting) is a busy read.

The gauges: vLLM ``vllm:num_requests_running`` + ``vllm:num_requests_waiting``; SGLang
``sglang:num_running_reqs``, ``num_queue_reqs``, ``num_prefill_bootstrap_queue_reqs``,
``num_prefill_inflight_queue_reqs``, ``num_decode_prealloc_queue_reqs``,
``num_decode_transfer_queue_reqs``.  A take-over role gets no hook and keeps its grace as given.
"""

from __future__ import annotations

from typing import Any

from api import engines

INITIAL_WAIT_SECONDS = 5
READ_TIMEOUT_SECONDS = 2
IDLE_READS = 2
GAUGES = {
    engines.ENGINE_VLLM: ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    engines.ENGINE_SGLANG: (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:num_prefill_bootstrap_queue_reqs",
        "sglang:num_prefill_inflight_queue_reqs",
        "sglang:num_decode_prealloc_queue_reqs",
        "sglang:num_decode_transfer_queue_reqs",
    ),
}

# One program, its parameters passed as argv: scheme, port, grace, gauges...
_PROGRAM = f"""
import ssl, sys, time, urllib.error, urllib.request
scheme, port, grace, gauges = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), set(sys.argv[4:])
start = time.monotonic()
time.sleep({INITIAL_WAIT_SECONDS})
context = ssl._create_unverified_context()
idle = 0
while time.monotonic() - start < grace - 5:
    try:
        page = urllib.request.urlopen(scheme + "://127.0.0.1:%d/metrics" % port, timeout={READ_TIMEOUT_SECONDS}, context=context).read().decode()
    except urllib.error.HTTPError:
        sys.exit(0)
    except urllib.error.URLError as error:
        if isinstance(error.reason, (ConnectionRefusedError, ssl.SSLError)):
            sys.exit(0)
        page = None
    except (ConnectionRefusedError, ssl.SSLError):
        sys.exit(0)
    except Exception:
        page = None
    busy = True
    if page is not None:
        try:
            values = [float(line.rsplit(None, 1)[1]) for line in page.splitlines()
                      if line and not line.startswith("#") and line.split("{{")[0].split()[0] in gauges]
            busy = not values or sum(values) > 0
        except (ValueError, IndexError):
            busy = True
    idle = 0 if busy else idle + 1
    if idle >= {IDLE_READS}:
        sys.exit(0)
    time.sleep(1)
"""


def pre_stop(engine: str, scheme: str, port: int, grace: int) -> dict[str, Any]:
    """The ``lifecycle`` of a managed ``main`` container."""
    command = ["python3", "-c", _PROGRAM.strip(), scheme, str(port), str(grace), *GAUGES.get(engine, ())]
    return {"preStop": {"exec": {"command": command}}}
