"""``make examples-check``: a new user's path, on the cluster ``make dev`` brought up.

    .venv/bin/python tests/cluster/examples_check.py [--timeout 600] [--keep]

What the README tells a newcomer to do, and nothing more: copy ``examples/``, replace the SSH key
placeholder with a key made by ``ssh-keygen`` (examples/README.md), ``kubectl apply -f`` the copy,
and wait. The InstanceTypes and the queue the examples name must exist on ``make dev`` as they are:
the check does not substitute them, it fails naming the one that is missing.

Ready means, within ``--timeout`` seconds of the apply:
- the Pod ``team-a/gpu-workload`` Running, in the Ubuntu 24.04 image it names, with the card the
  device manager handed it visible inside;
- every ModelDeployment ``Ready`` and answering through its endpoint Service: ``/v1/models`` names the
  served model and a chat completion comes back, asked at a ready endpoint of the Service
  (``kubectl port-forward`` where the node serves it, else the Pod address the EndpointSlice lists,
  which is what kube-proxy would forward to; the local nodes run no kube-proxy);
- the ModelArtifact resolved, and its weights read by the engine that mounted them (the stand-in
  engine refuses to start without a readable model: its ``/v1/models`` reports the files);
- the Instance ``Ready``, and a real ``ssh`` login with the generated key at its Pod address gets a
  shell in ``main`` (Ubuntu 24.04) that sees the same card slice as ``main``; another key is refused;
- the KVCacheBackend, KVCachePool and KVCachePoolBinding ``Ready``.

Objects of an earlier run are deleted first (the TopologySource stays: ``make dev`` applies it and
waits for the zones it serves). Exit 0 when all is ready, 1 with what is not.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import reach

EXAMPLES = harness.REPO_ROOT / "examples"
PLACEHOLDER = "ssh-ed25519 <paste-your-public-key-here>"
KEEP = {"00-namespace-team-a.yaml", "20-topologysource-cloud-zones.yaml"}  # not deleted before a run
SESSION = 'echo "nvidia=$NVIDIA_VISIBLE_DEVICES"; . /etc/os-release; echo "os=$ID $VERSION_ID"'


def _say(message: str) -> None:
    print(f"examples-check: {message}", flush=True)


def prepare(directory: Path) -> Path:
    """The examples as a user edits them: the key line replaced. Returns the private key's path."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        shutil.copy(path, directory / path.name)
    key, public = reach.keygen(directory, "gpustack-instance")
    key_file = directory / "60-instancesshpublickey-workspace-key.yaml"
    text = key_file.read_text()
    assert PLACEHOLDER in text, f"{key_file.name} no longer carries the placeholder {PLACEHOLDER!r}"
    key_file.write_text(text.replace(PLACEHOLDER, public))
    return key


def documents(directory: Path) -> list[dict[str, Any]]:
    import yaml

    found = []
    for path in sorted(directory.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def names_exist(info: harness.ClusterInfo, docs: list[dict[str, Any]]) -> list[str]:
    """The InstanceTypes and queues the examples name that this cluster lacks."""
    types = {t["metadata"]["name"]: t for t in info.kubectl_json("get", "instancetypes")["items"]}
    entrances = {(t.get("status") or {}).get("entrance") for t in types.values()}
    missing = []
    for doc in docs:
        spec = doc.get("spec") or {}
        named = [r.get("instanceType") for r in spec.get("roles") or []] + [spec.get("type")]
        for name in filter(None, named):
            if doc["kind"] in ("ModelDeployment", "Instance") and name not in types:
                missing.append(f"{doc['kind']} {doc['metadata']['name']}: InstanceType {name}")
        queue = (doc["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if queue and queue not in entrances:
            missing.append(f"{doc['kind']} {doc['metadata']['name']}: queue {queue}")
    return missing


def delete_earlier(info: harness.ClusterInfo, directory: Path) -> None:
    files = [str(p) for p in sorted(directory.glob("*.yaml"), reverse=True) if p.name not in KEEP]
    args = [a for f in files for a in ("-f", f)]
    info.kubectl(
        "delete", *args, "--ignore-not-found", "--wait=true", "--timeout=300s", check=False, timeout=330
    )


def _get(info: harness.ClusterInfo, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    where = ["-n", namespace] if namespace else []
    found = info.kubectl("get", kind, name, *where, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


def _conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {c.get("type"): c.get("status") for c in _status(obj).get("conditions") or []}


def ready_state(doc: dict[str, Any], obj: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the object is in its ready state, and what it shows now."""
    status = _status(obj)
    if obj is None:
        return False, "absent"
    kind = doc["kind"]
    if kind == "Pod":
        return status.get("phase") == "Running", str(status.get("phase"))
    if kind == "ModelArtifact":
        resolved = _conditions(obj).get("Resolved") == "True" or bool(status.get("resolvedRevision"))
        return resolved, "resolved" if resolved else json.dumps(_conditions(obj))
    if kind in ("ModelDeployment", "Instance", "KVCacheBackend", "KVCachePool", "KVCachePoolBinding"):
        return status.get("phase") == "Ready", str(status.get("phase"))
    if kind == "InstanceSSHPublicKey":
        return True, "stored"
    return True, "applied"


def wait_all(info: harness.ClusterInfo, docs: list[dict[str, Any]], deadline: float, started: float):
    """Poll every object until all are ready in one pass (an object may leave its ready state, as a
    deployment does when it rolls onto its cache binding) or the deadline passes. Returns, by object,
    the seconds after which it was first seen ready (None: never) and what each shows last."""
    first_ready: dict[str, float | None] = {}
    shown: dict[str, str] = {}
    watched = [d for d in docs if d["kind"] not in ("Namespace", "TopologySource")]
    while True:
        every = True
        for doc in watched:
            key = f"{doc['kind']} {doc['metadata'].get('namespace', 'default')}/{doc['metadata']['name']}"
            namespace = doc["metadata"].get("namespace") or ("default" if doc["kind"] in NAMESPACED else None)
            ok, now = ready_state(doc, _get(info, doc["kind"], doc["metadata"]["name"], namespace))
            shown[key] = now
            every = every and ok
            if ok and first_ready.get(key) is None:
                first_ready[key] = round(time.monotonic() - started)
            first_ready.setdefault(key, None)
        if every or time.monotonic() > deadline:
            return every, first_ready, shown
        time.sleep(2)


READY = {"Running", "Ready", "resolved", "stored", "applied"}
NAMESPACED = {
    "Pod",
    "ModelDeployment",
    "ModelArtifact",
    "Instance",
    "InstanceSSHPublicKey",
    "KVCachePoolBinding",
}


def answers(info: harness.ClusterInfo, deployment: dict[str, Any]) -> str:
    """The deployment's endpoint answers ``/v1/models`` with its served name and a chat completion."""
    name, namespace = deployment["metadata"]["name"], deployment["metadata"]["namespace"]
    endpoint = _status(deployment).get("endpoint") or ""
    service = re.match(r"https?://([^.]+)\.", endpoint)
    assert service, f"ModelDeployment {namespace}/{name} reports no endpoint ({endpoint!r})"
    base = f"http://{reach.service_endpoint(info, namespace, service.group(1))}"
    models = reach.http(f"{base}/v1/models")
    served = [m["id"] for m in models.get("data") or []]
    assert served, f"{name}: /v1/models at {base} lists no model: {models}"
    answer = reach.http(f"{base}/v1/chat/completions",
                  {"model": served[0], "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8})  # fmt: skip
    text = answer["choices"][0]["message"]["content"]
    assert text, f"{name}: an empty completion: {answer}"
    return f"{endpoint} ({base}) serves {served[0]}: {text!r}"


def logs_in(info: harness.ClusterInfo, key: Path, directory: Path, instance: dict[str, Any]) -> str:
    name, namespace = instance["metadata"]["name"], instance["metadata"]["namespace"]
    address = _status(instance)["podIPs"][0]["ip"]
    session = reach.ssh_answering(key, address, SESSION)
    assert session.returncode == 0, f"ssh root@{address}: {session.stderr.strip()}"
    seen = dict(line.split("=", 1) for line in session.stdout.splitlines() if "=" in line)
    main = info.kubectl(
        "exec", name, "-n", namespace, "-c", "main", "--", "printenv", "NVIDIA_VISIBLE_DEVICES"
    )
    assert seen["os"] == "ubuntu 24.04", f"the session runs in {seen['os']!r}, not main's Ubuntu 24.04"
    assert seen["nvidia"] == main.stdout.strip() and seen["nvidia"], (seen, main.stdout)
    other = directory / "other-key"
    if not other.exists():
        reach.keygen(directory, other.name)
    refused = reach.ssh(other, address, "true")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
    return f"ssh root@{address}: Ubuntu 24.04, NVIDIA_VISIBLE_DEVICES={seen['nvidia']} as main; another key refused"


def pod_sees_its_card(info: harness.ClusterInfo, pod: dict[str, Any]) -> str:
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    script = '. /etc/os-release; echo "$ID $VERSION_ID nvidia=$NVIDIA_VISIBLE_DEVICES"'
    inside = info.kubectl("exec", name, "-n", namespace, "--", "sh", "-c", script).stdout.strip()
    assert inside.startswith("ubuntu 24.04 nvidia=GPU-"), inside
    return inside


CHECKS = {"ModelDeployment": "modeldeployment", "Instance": "instance", "Pod": "pod"}


def check(info: harness.ClusterInfo, key: Path, directory: Path, doc: dict[str, Any]) -> str:
    """What a user does with the ready object: ask the deployment, log in to the Instance, look
    inside the Pod. Raises AssertionError saying what does not work."""
    name, namespace = doc["metadata"]["name"], doc["metadata"].get("namespace", "default")
    obj = info.kubectl_json("get", CHECKS[doc["kind"]], name, "-n", namespace)
    if doc["kind"] == "ModelDeployment":
        return answers(info, obj)
    if doc["kind"] == "Instance":
        return logs_in(info, key, directory, obj)
    return pod_sees_its_card(info, obj)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--keep", action="store_true", help="skip deleting an earlier run's objects")
    args = parser.parse_args(argv)
    if not harness.is_running():
        _say("no cluster is up: run `make dev` first (make examples-check does)")
        return 1
    info = harness.info()
    with tempfile.TemporaryDirectory(prefix="gpustack-examples-") as tmp:
        directory = Path(tmp)
        key = prepare(directory)
        docs = documents(directory)
        missing = names_exist(info, docs)
        if missing:
            _say("the examples name what make dev lacks: " + "; ".join(missing))
            return 1
        if not args.keep:
            _say("deleting an earlier run's objects (the TopologySource stays)")
            delete_earlier(info, directory)
        started = time.monotonic()
        applied = info.kubectl("apply", "-f", str(directory), check=False, timeout=300)
        _say(f"kubectl apply -f examples/ (key replaced): rc {applied.returncode}")
        if applied.returncode != 0:
            print(applied.stderr, file=sys.stderr)
            return 1
        every, first_ready, shown = wait_all(info, docs, started + args.timeout, started)
        for name, after in sorted(first_ready.items(), key=lambda kv: kv[1] if kv[1] is not None else 1e9):
            state = f"ready after {after} s" if after is not None else "never ready"
            _say(f"  {name:55} {state}; now {shown[name]}")
        failures = (
            [] if every else [f"{name}: {shown[name]}" for name in first_ready if shown[name] not in READY]
        )
        checks = [(f"{d['kind']} {d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}", d)
                  for d in docs if d["kind"] in CHECKS]  # fmt: skip
        for obj_key, doc in checks if every else []:
            while True:  # what is ready answers; a request may still meet a Pod the kubelet has not probed
                try:
                    _say(f"  {obj_key}: {check(info, key, directory, doc)}")
                    break
                except (AssertionError, OSError, harness.ClusterError, KeyError, ValueError) as error:
                    if time.monotonic() > started + args.timeout:
                        failures.append(f"{obj_key}: {error}")
                        break
                    time.sleep(2)
        _say(f"done in {time.monotonic() - started:.0f} s")
        if failures:
            _say("NOT ready:\n  " + "\n  ".join(failures))
            return 1
        _say("every example is ready")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
