#!/usr/bin/env python3
"""Renders what up.sh needs to run Kueue outside a Pod (stdlib only).

  kueue_manifests.py crds     --url URL --ca-bundle B64 [--kueue-src DIR]  < List JSON
  kueue_manifests.py webhooks --url URL --ca-bundle B64                    < List JSON
  kueue_manifests.py config   --webhook-port N --health-port N --metrics-port N
                              --cert-dir DIR --chart-config FILE [--kueue-src DIR]

The List JSON is upstream YAML converted by `kubectl create --dry-run=client
-o json -f ...` (so no YAML library is needed). Upstream's Service-based
clientConfigs become `url: https://127.0.0.1:<port>/<path>` with our CA, which
is how kube-apiserver reaches a webhook server that runs on the host.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# Namespaces whose Pods Kueue must never touch (the chart's unmanagedNamespaces plus its own).
UNMANAGED_NAMESPACES = ["kube-system", "kueue-system", "gpustack-system"]
# Pod-based webhooks that upstream restricts with a namespaceSelector.
POD_BASED_WEBHOOKS = {"mpod", "mdeployment", "mstatefulset", "vpod", "vdeployment", "vstatefulset"}

KUEUE_NAME_PREFIX = "kueue-"  # upstream's config/default namePrefix


def known_feature_gates(kueue_src: Path | None) -> set[str] | None:
    if kueue_src is None:
        return None
    text = (kueue_src / "pkg/features/kube_features.go").read_text()
    return set(re.findall(r'featuregate\.Feature\s*=\s*"([A-Za-z0-9]+)"', text))


# What running Kueue as a process on the host changes in the chart's configuration: where it
# listens, its certificates (ours, for 127.0.0.1; its own rotator off) and no leader election.
# Nothing else is touched: the feature gates, resources, integrations and namespaces are the chart's.
PLACEMENT = ("health", "metrics", "webhook", "leaderElection", "internalCertManagement", "namespace")
# And one gate: the visibility server binds a fixed port (8082) that the two local clusters would
# share, and no APIService routes to it here.
PLACEMENT_GATES = {"VisibilityOnDemand": False}


def chart_configuration(config_map: dict) -> dict:
    """The configuration in the chart's ConfigMap (``kubectl create --dry-run=client -o json`` of
    ``helm template --show-only templates/kueue/manager-config.yaml``)."""
    return json.loads(config_map["data"]["controller_manager_config.yaml"])


def render_config(args: argparse.Namespace, chart: dict) -> dict:
    """The chart's rendered configuration, unchanged but for :data:`PLACEMENT`. A feature gate this
    Kueue does not know is an error, not a filter: Kueue would refuse to start on it in a cluster too."""
    known = known_feature_gates(args.kueue_src)
    unknown = sorted(set(chart.get("featureGates") or {}) - known) if known is not None else []
    if unknown:
        raise SystemExit(
            f"kueue_manifests.py: the chart enables feature gate(s) {', '.join(unknown)} that this Kueue "
            "does not know; Kueue refuses to start on them (key them to kueue.version in the chart)"
        )
    placed = {
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{args.health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{args.metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": args.webhook_port, "certDir": str(args.cert_dir)},
        "leaderElection": {"leaderElect": False},
        # We hand Kueue a serving cert for 127.0.0.1 and register the webhooks ourselves.
        "internalCertManagement": {"enable": False},
    }
    assert set(placed) == set(PLACEMENT)
    gates = {**(chart.get("featureGates") or {}), **PLACEMENT_GATES}
    return {**{k: v for k, v in chart.items() if k not in PLACEMENT}, **placed, "featureGates": gates}


def client_config(url: str, path: str, ca_bundle: str) -> dict:
    return {"url": url.rstrip("/") + path, "caBundle": ca_bundle}


def conversion_crds(kueue_src: Path | None) -> set[str] | None:
    """Plural names of the CRDs upstream wires to the /convert webhook."""
    if kueue_src is None:
        return None
    text = (kueue_src / "config/components/crd/kustomization.yaml").read_text()
    return set(re.findall(r"^- path: patches/webhook_in_([a-z]+)\.yaml", text, re.M))


def render_crds(doc: dict, args: argparse.Namespace) -> dict:
    wanted = conversion_crds(args.kueue_src)
    for crd in doc.get("items", [doc]):
        plural = crd["spec"]["names"]["plural"]
        multi_version = len(crd["spec"].get("versions", [])) > 1
        if (wanted is None and multi_version) or (wanted is not None and plural in wanted):
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": client_config(args.url, "/convert", args.ca_bundle),
                    "conversionReviewVersions": ["v1"],
                },
            }
    return doc


def render_webhooks(doc: dict, args: argparse.Namespace) -> dict:
    for cfg in doc.get("items", [doc]):
        meta = cfg["metadata"]
        if not meta["name"].startswith(KUEUE_NAME_PREFIX):
            meta["name"] = KUEUE_NAME_PREFIX + meta["name"]
        meta.setdefault("labels", {})["app.kubernetes.io/name"] = "kueue"
        for hook in cfg.get("webhooks", []):
            svc = hook["clientConfig"].get("service") or {}
            hook["clientConfig"] = client_config(args.url, svc.get("path", "/"), args.ca_bundle)
            if hook["name"].split(".")[0] in POD_BASED_WEBHOOKS:
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": UNMANAGED_NAMESPACES,
                        }
                    ]
                }
    return doc


def read_objects(text: str) -> dict:
    """kubectl prints one JSON document per object (or a List): return a List."""
    decoder = json.JSONDecoder()
    items, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        obj, pos = decoder.raw_decode(text, pos)
        items.extend(obj["items"] if obj.get("kind", "").endswith("List") else [obj])
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["crds", "webhooks", "config"])
    p.add_argument("--url", default="")
    p.add_argument("--ca-bundle", default="")
    p.add_argument("--kueue-src", type=Path)
    p.add_argument("--webhook-port", type=int)
    p.add_argument("--health-port", type=int)
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--cert-dir", type=Path)
    p.add_argument("--chart-config", type=Path, help="the chart's Kueue ConfigMap as JSON (config mode)")
    args = p.parse_args(argv)
    if args.mode == "config":
        out = render_config(args, chart_configuration(json.loads(args.chart_config.read_text())))
    else:
        doc = read_objects(sys.stdin.read())
        out = render_crds(doc, args) if args.mode == "crds" else render_webhooks(doc, args)
    # JSON is YAML, so Kueue's config loader reads this too.
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
