"""The KV-events publisher and the ports the operator reserves (model-deployment.md §11.4).

A role publishes its cache events iff the router is ``llm-d-router``, the engine is vLLM on a
non-Ascend pool, the role is managed and is not a ``Decode``: it gets ``--kv-events-config`` (a ZMQ
publisher on ``tcp://*:5557``, replay on ``tcp://*:5558``, 10,000 retained batches, high-water mark
and queue depth 100,000, topic ``kv@``) and container ports 5557/5558.  Status publishes the role
Service's host with those ports, never the bind string.

The reserved set itself (what admission refuses a role to declare) is the view's
:meth:`~readmodels.modeldeployment.Deployment.reserved_ports`, so the renderer and the webhook read
one statement of it.
"""

from __future__ import annotations

import orjson

from api import constants, engines
from api.objects import Obj
from readmodels.modeldeployment import DECODE, Deployment, Role

KV_EVENTS_FLAG = "--kv-events-config"
PUBLISHER_PORT, REPLAY_PORT = constants.KV_EVENTS_PORTS
PORT_NAMES = {PUBLISHER_PORT: "kv-events", REPLAY_PORT: "kv-replay"}
TOPIC = "kv@"
BUFFER_STEPS = 10_000
HIGH_WATER_MARK = 100_000
MAX_QUEUE_SIZE = 100_000


def publishes(md: Deployment, role: Role, ascend: bool) -> bool:
    """Whether ``role``'s Pods carry the publisher configuration."""
    return (
        md.router_name == engines.ROUTER_LLM_D
        and md.engine == engines.ENGINE_VLLM
        and not ascend
        and role.managed
        and role.kind != DECODE
    )


def config() -> Obj:
    """vLLM's ``KVEventsConfig`` document."""
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{PUBLISHER_PORT}",
        "replay_endpoint": f"tcp://*:{REPLAY_PORT}",
        "buffer_steps": BUFFER_STEPS,
        "hwm": HIGH_WATER_MARK,
        "max_queue_size": MAX_QUEUE_SIZE,
        "topic": TOPIC,
    }


def args() -> list[str]:
    return [KV_EVENTS_FLAG, orjson.dumps(config()).decode()]


def ports() -> list[Obj]:
    return [
        {"name": PORT_NAMES[PUBLISHER_PORT], "containerPort": PUBLISHER_PORT, "protocol": "TCP"},
        {"name": PORT_NAMES[REPLAY_PORT], "containerPort": REPLAY_PORT, "protocol": "TCP"},
    ]


def endpoints(md: Deployment, role: Role, namespace: str) -> Obj:
    """The dialable endpoints status publishes: the role Service's host with the two ports."""
    host = f"{md.name}-{role.name}.{namespace}.svc"
    return {
        "endpoint": f"tcp://{host}:{PUBLISHER_PORT}",
        "replayEndpoint": f"tcp://{host}:{REPLAY_PORT}",
        "topic": TOPIC,
    }
