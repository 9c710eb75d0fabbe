"""The managed router's objects, purely (model-deployment.md §11.3, §10 ``status.router``).

``spec.router`` renders ``<md>-router``: a ServiceAccount, a Role and RoleBinding (read Pods: every
router finds the replicas by label through the API), a ConfigMap (``llm-d-router``'s scoring and
proxy configuration), a Deployment of ``router.replicas`` (absent = 1) and a ClusterIP Service
``http`` on port 8000.  They are pruned when ``spec.router`` goes.

- ``vllm-router`` / ``sglang-gateway``: one process configured by its command line — bind address
  and port, Prometheus bind, Kubernetes service discovery in the deployment's namespace on the roles'
  target port, the role selector (or the prefill and decode selectors and the disaggregation switch
  for a pair; ``vllm-router`` also names the ``mooncake`` transfer connector), the request timeout
  when set; ``cache_aware`` is each router's own default, and ``extraArgs`` come last.
- ``llm-d-router``: the endpoint picker (``--secure-serving=false``, ``--metrics-endpoint-auth=false``,
  the mounted scoring configuration: prefix cache 3 — not scored on a decode half —, queue depth 2,
  KV-cache utilisation 2) behind an Envoy proxy that asks it, over ext_proc, which replica serves.
  A pair gets the prefill/decode profile handler, its threshold from
  ``disaggregationThresholdTokens`` when set.

An unset ``requestTimeoutSeconds`` renders nothing: each router keeps its own default.
"""

from __future__ import annotations

import hashlib

import orjson

from api import constants, engines
from api.objects import Obj
from controllers.modeldeployment import labels, names
from readmodels.modeldeployment import DECODE, PREFILL, Deployment, Role, as_dict, as_list, as_str

COMPONENT = "router"
APP_NAME = "model-deployment-router"
PORT = 8000
METRICS_PORT = 29000
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
CONFIG_MOUNT = "/etc/gpustack/router"
EPP_CONFIG = "epp.yaml"
ENVOY_CONFIG = "envoy.yaml"
ANNOTATION_CONFIG_HASH = "modeldeployment.gpustack.ai/router-config-hash"
ANNOTATION_RENDER_HASH = "modeldeployment.gpustack.ai/render-hash"
KINDS = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service")
ROLE_KIND_LABEL = constants.LABEL_ROLE_KIND

COMMANDS = {
    engines.ROUTER_VLLM: ["vllm-router"],
    engines.ROUTER_SGLANG_GATEWAY: ["python3", "-m", "sglang_router.launch_router"],
}
PD_SWITCH = {
    engines.ROUTER_VLLM: "--vllm-pd-disaggregation",
    engines.ROUTER_SGLANG_GATEWAY: "--pd-disaggregation",
}

METRICS = {
    engines.ENGINE_VLLM: (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    ),
    engines.ENGINE_SGLANG: ("sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage"),
}


def selector(md: Deployment) -> dict[str, str]:
    return {
        constants.LABEL_APP_NAME: APP_NAME,
        constants.LABEL_APP_INSTANCE: md.name,
        constants.LABEL_APP_COMPONENT: COMPONENT,
    }


def _meta(md: Deployment, owner: Obj, name: str | None = None) -> Obj:
    return {
        "name": name or names.router_name(md.name),
        "namespace": md.namespace,
        "labels": {**labels.common(md.name), constants.LABEL_APP_COMPONENT: COMPONENT},
        "ownerReferences": [owner],
    }


def _pairs(d: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in d.items()]


def role_selector(md: Deployment, role_kind: str | None = None) -> dict[str, str]:
    """The serving Pods a router picks among: the deployment's replicas of one kind, or all; only
    the leaders when every such role spans several Pods (member 0 serves the API)."""
    out = labels.selector(md.name)
    if role_kind is not None:
        out[ROLE_KIND_LABEL] = labels.ROLE_KINDS[role_kind]
    chosen = [r for r in md.roles if role_kind is None or r.kind == role_kind]
    if chosen and all(r.size > 1 for r in chosen):
        out[constants.LABEL_MEMBER_INDEX] = "0"
    return out


def pod_labels(md: Deployment) -> dict[str, str]:
    """The router's own Pods: named apart from the serving Pods, so no role selector matches them."""
    return {
        constants.LABEL_APP_NAME: APP_NAME,
        constants.LABEL_APP_INSTANCE: md.name,
        constants.LABEL_APP_COMPONENT: COMPONENT,
        constants.LABEL_PART_OF: constants.PART_OF_WORKER,
    }


def _cli_args(md: Deployment, target_port: int) -> list[str]:
    router = as_dict(md.router)
    args = [
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(METRICS_PORT),
        "--service-discovery",
        "--service-discovery-namespace",
        md.namespace,
        "--service-discovery-port",
        str(target_port),
    ]
    if md.pair:
        args.append(PD_SWITCH[md.router_name])
        if md.router_name == engines.ROUTER_VLLM:
            args += ["--kv-connector", "mooncake"]
        args += ["--prefill-selector", *_pairs(role_selector(md, PREFILL))]
        args += ["--decode-selector", *_pairs(role_selector(md, DECODE))]
    else:
        args += ["--selector", *_pairs(role_selector(md))]
    timeout = router.get("requestTimeoutSeconds")
    if isinstance(timeout, int) and not isinstance(timeout, bool):
        args += ["--request-timeout-secs", str(timeout)]
    return args + [a for a in as_list(router.get("extraArgs")) if isinstance(a, str)]


def epp_config(md: Deployment) -> str:
    """The endpoint picker's scoring configuration (YAML is a superset of JSON)."""
    plugins: list[Obj] = [
        {"type": "prefix-cache-scorer"},
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "max-score-picker"},
    ]
    scoring = [
        {"pluginRef": "queue-scorer", "weight": 2},
        {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
        {"pluginRef": "max-score-picker"},
    ]
    prefix = {"pluginRef": "prefix-cache-scorer", "weight": 3}
    if md.pair:
        handler: Obj = {"type": "pd-profile-handler"}
        threshold = as_dict(md.router).get("disaggregationThresholdTokens")
        if isinstance(threshold, int) and not isinstance(threshold, bool):
            handler["parameters"] = {"threshold": threshold}
        plugins += [
            handler,
            {"type": "prefill-header-handler"},
            {
                "type": "by-label",
                "name": "prefill-filter",
                "parameters": {"label": ROLE_KIND_LABEL, "validValues": ["prefill"]},
            },
            {
                "type": "by-label",
                "name": "decode-filter",
                "parameters": {"label": ROLE_KIND_LABEL, "validValues": ["decode"]},
            },
        ]
        profiles = [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, prefix, *scoring]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, *scoring]},  # no prefix score
        ]
    else:
        profiles = [{"name": "default", "plugins": [prefix, *scoring]}]
    document = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": profiles,
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


_ENVOY = "type.googleapis.com/envoy.extensions"
_EXT_PROC_MODE = {
    "request_header_mode": "SEND",
    "request_body_mode": "FULL_DUPLEX_STREAMED",
    "request_trailer_mode": "SEND",
    "response_header_mode": "SEND",
    "response_body_mode": "FULL_DUPLEX_STREAMED",
    "response_trailer_mode": "SEND",
}
_ACCESS_LOG_FORMAT = {
    "code": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "details": "%RESPONSE_CODE_DETAILS%",
    "duration": "%DURATION%",
    "endpoint": "%UPSTREAM_HOST%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
}


def _connection_manager(route: Obj) -> Obj:
    """HTTP on :8000: ask the picker over ext_proc, route to the endpoint it names, log each request."""
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": f"{_ENVOY}.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "router",
            "access_log": [
                {
                    "name": "envoy.access_loggers.stdout",
                    "typed_config": {
                        "@type": f"{_ENVOY}.access_loggers.stream.v3.StdoutAccessLog",
                        "log_format": {"json_format": _ACCESS_LOG_FORMAT},
                    },
                }
            ],
            "route_config": {
                "virtual_hosts": [
                    {"name": "all", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": route}]}
                ]
            },
            "http_filters": [
                {
                    "name": "envoy.filters.http.ext_proc",
                    "typed_config": {
                        "@type": f"{_ENVOY}.filters.http.ext_proc.v3.ExternalProcessor",
                        "grpc_service": {"envoy_grpc": {"cluster_name": "endpoint_picker"}},
                        "processing_mode": _EXT_PROC_MODE,
                        "failure_mode_allow": False,
                    },
                },
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": f"{_ENVOY}.filters.http.router.v3.Router"},
                },
            ],
        },
    }


def _clusters() -> list[Obj]:
    """The endpoint the picker names (the original destination header), and the picker itself."""
    picker = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": EPP_GRPC_PORT}}}
    return [
        {
            "name": "original_destination",
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": "5s",
            "original_dst_lb_config": {
                "use_http_header": True,
                "http_header_name": "x-gateway-destination-endpoint",
            },
        },
        {
            "name": "endpoint_picker",
            "type": "STATIC",
            "connect_timeout": "5s",
            "typed_extension_protocol_options": {
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                    "@type": f"{_ENVOY}.upstreams.http.v3.HttpProtocolOptions",
                    "explicit_http_config": {"http2_protocol_options": {}},
                }
            },
            "load_assignment": {
                "cluster_name": "endpoint_picker",
                "endpoints": [{"lb_endpoints": [{"endpoint": picker}]}],
            },
        },
    ]


def envoy_config(md: Deployment) -> str:
    """Envoy on :8000, asking the picker on 127.0.0.1 which endpoint serves, then forwarding there."""
    timeout = as_dict(md.router).get("requestTimeoutSeconds")
    route: Obj = {"cluster": "original_destination"}
    if isinstance(timeout, int) and not isinstance(timeout, bool):
        route["timeout"] = f"{timeout}s"
    listener = {
        "name": "http",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": PORT}},
        "filter_chains": [{"filters": [_connection_manager(route)]}],
    }
    document = {"static_resources": {"listeners": [listener], "clusters": _clusters()}}
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def _llm_d_containers(md: Deployment, image: str, proxy_image: str, target_port: int, pull: Obj) -> list[Obj]:
    router = as_dict(md.router)
    epp_args = [
        f"--endpoint-selector={','.join(_pairs(role_selector(md)))}",
        f"--endpoint-target-ports={target_port}",
        f"--config-file={CONFIG_MOUNT}/{EPP_CONFIG}",
        "--secure-serving=false",
        f"--grpc-port={EPP_GRPC_PORT}",
        f"--grpc-health-port={EPP_HEALTH_PORT}",
        "--metrics-endpoint-auth=false",
        *[a for a in as_list(router.get("extraArgs")) if isinstance(a, str)],
    ]
    mount = [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}]
    epp: Obj = {
        "name": "epp",
        "image": image,
        "args": epp_args,
        "ports": [
            {"name": "grpc", "containerPort": EPP_GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"},
            "periodSeconds": 5,
        },
        "volumeMounts": mount,
        **pull,
    }
    proxy: Obj = {
        "name": "proxy",
        "image": proxy_image,
        "args": ["--config-path", f"{CONFIG_MOUNT}/{ENVOY_CONFIG}", "--log-level", "warn"],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 5},
        "volumeMounts": mount,
        **pull,
    }
    return [proxy, epp]


def stamp_hash(obj: Obj) -> Obj:
    """``obj`` with the hash of its rendered body in ``metadata.annotations``: the controller applies
    an object only when the live one carries another hash."""
    digest = hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()
    obj["metadata"].setdefault("annotations", {})[ANNOTATION_RENDER_HASH] = digest
    return obj


def live_hash(obj: Obj | None) -> str:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RENDER_HASH, "")


def render(md: Deployment, owner: Obj, *, target_port: int, image: str, proxy_image: str) -> list[Obj]:
    """Every object of the router, in the order they are applied, each carrying its render hash."""
    return [
        stamp_hash(obj)
        for obj in _render(md, owner, target_port=target_port, image=image, proxy_image=proxy_image)
    ]


def _rbac(md: Deployment, owner: Obj) -> list[Obj]:
    """The router's identity: it reads the deployment's Pods to find the replicas."""
    name = names.router_name(md.name)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(md, owner)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(md, owner),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(md, owner),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": md.namespace}],
        },
    ]


def _cli_container(md: Deployment, image: str, target_port: int, pull: Obj) -> Obj:
    return {
        "name": "router",
        "image": image,
        "command": COMMANDS[md.router_name],
        "args": _cli_args(md, target_port),
        "ports": [
            {"name": "http", "containerPort": PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 5},
        **pull,
    }


def _deployment(md: Deployment, owner: Obj, containers: list[Obj], config: dict[str, str]) -> Obj:
    router = as_dict(md.router)
    name = names.router_name(md.name)
    pod_spec: Obj = {"serviceAccountName": name, "containers": containers}
    if config:
        pod_spec["volumes"] = [{"name": "config", "configMap": {"name": name}}]
    secrets = [
        {"name": as_str(as_dict(s).get("name"))}
        for s in as_list(router.get("imagePullSecrets"))
        if as_str(as_dict(s).get("name"))
    ]
    if secrets:
        pod_spec["imagePullSecrets"] = secrets
    replicas = router.get("replicas")
    # A configuration change rolls the router's Pods (Kueue never sees them: no queue label).
    digest = hashlib.sha256(orjson.dumps(config, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(md, owner),
        "spec": {
            "replicas": replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1,
            "selector": {"matchLabels": selector(md)},
            "template": {
                "metadata": {"labels": pod_labels(md), "annotations": {ANNOTATION_CONFIG_HASH: digest}},
                "spec": pod_spec,
            },
        },
    }


def _render(md: Deployment, owner: Obj, *, target_port: int, image: str, proxy_image: str) -> list[Obj]:
    router = as_dict(md.router)
    image = as_str(router.get("image")) or image
    pull: Obj = {}
    if as_str(router.get("imagePullPolicy")):
        pull["imagePullPolicy"] = router["imagePullPolicy"]
    objects = _rbac(md, owner)
    config: dict[str, str] = {}
    if md.router_name == engines.ROUTER_LLM_D:
        config = {EPP_CONFIG: epp_config(md), ENVOY_CONFIG: envoy_config(md)}
        objects.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(md, owner), "data": config}
        )
        containers = _llm_d_containers(md, image, proxy_image, target_port, pull)
    else:
        containers = [_cli_container(md, image, target_port, pull)]
    objects.append(_deployment(md, owner, containers, config))
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(md, owner),
            "spec": {
                "type": "ClusterIP",
                "selector": selector(md),
                "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
            },
        }
    )
    return objects


def endpoint(md: Deployment) -> str:
    return f"http://{names.router_name(md.name)}.{md.namespace}.svc:{PORT}"


def status(
    md: Deployment, role_endpoints: dict[str, str], publishing: dict[str, bool], kv: dict[str, Obj]
) -> Obj:
    """``status.router``: the contract the router was configured from (only rendered strings)."""
    roles = []
    for role in md.roles:
        entry: Obj = {
            "name": role.name,
            "kind": role.kind,
            "selector": {
                **labels.selector(md.name, role.name),
                **({constants.LABEL_MEMBER_INDEX: "0"} if role.size > 1 else {}),
            },
        }
        if role.name in role_endpoints:
            entry["endpoint"] = role_endpoints[role.name]
        if publishing.get(role.name) and role.name in kv:
            entry["kvEvents"] = kv[role.name]
        roles.append(entry)
    waiting, running, usage = METRICS.get(md.engine, METRICS[engines.ENGINE_VLLM])
    return {
        "name": md.router_name,
        "endpoint": endpoint(md),
        "roles": roles,
        "metrics": {
            "port": PORT,
            "queuedRequests": waiting,
            "runningRequests": running,
            "kvCacheUtilization": usage,
        },
    }


def role_endpoint(md: Deployment, role: Role, scheme: str, port: int) -> str:
    return f"{scheme}://{names.role_service(md.name, role.name)}.{md.namespace}.svc:{port}"
