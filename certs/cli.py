"""``gpustack-operator certs``: issue or rotate the webhook certificates, optionally patching the
CA into the webhook configurations already in the cluster."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import re
import sys

from certs import issue

_DURATION = re.compile(r"^(\d+)([hm])$")


def parse_duration(text: str) -> dt.timedelta:
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"duration {text!r}: use hours or minutes, e.g. 720h")
    amount, unit = int(match.group(1)), match.group(2)
    return dt.timedelta(hours=amount) if unit == "h" else dt.timedelta(minutes=amount)


def patch_ca_bundle(directory: str, kubeconfig: str | None) -> list[str]:
    """Write the CA into every entry of our two webhook configurations in the cluster."""
    from api import constants
    from kube.client import JSON_PATCH, Client, load_api_client

    client = Client(load_api_client(kubeconfig, component="certs"))
    bundle = base64.b64encode(issue.ca_bundle(directory)).decode()
    patched = []
    for kind, name in (
        ("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION),
        ("ValidatingWebhookConfiguration", constants.VALIDATING_CONFIGURATION),
    ):
        current = client.get(kind, name)
        if current is None:
            continue
        ops = [
            {
                "op": "replace" if "caBundle" in w.get("clientConfig", {}) else "add",
                "path": f"/webhooks/{i}/clientConfig/caBundle",
                "value": bundle,
            }
            for i, w in enumerate(current.get("webhooks") or [])
        ]
        if ops:
            client.patch(kind, name, ops, content_type=JSON_PATCH)
            patched.append(f"{kind}/{name}")
    return patched


def run(args: argparse.Namespace) -> int:
    try:
        rotate_before = parse_duration(args.rotate_before)
    except ValueError as error:
        print(f"gpustack-operator certs: --rotate-before: {error}", file=sys.stderr)
        return 2
    dns = issue.service_names(args.service, args.namespace) + list(args.dns)
    ips = list(args.ip) or ["127.0.0.1"]
    print(issue.ensure(args.dir, dns, ips, rotate_before))
    if args.patch_ca_bundle:
        for name in patch_ca_bundle(args.dir, args.kubeconfig):
            print(f"patched caBundle of {name}")
    return 0
