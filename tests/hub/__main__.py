"""``python -m tests.hub --root DIR --port N``: the local hub as a process (e2e, ``make dev``).

With ``--demo`` it first writes small public repositories if absent: ``demo/tiny-model`` and a
stand-in for every repository ``examples/`` names (``Qwen/Qwen2.5-7B-Instruct``, ``Qwen/Qwen3-8B``,
…), about 1 MiB each.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

from tests.hub.server import HubServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_repositories() -> list[str]:
    """The Hub repositories ``examples/`` names: each deployment's model and each artifact's source."""
    import yaml

    found = set()
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            if doc.get("kind") == "ModelDeployment" and (spec.get("model") or {}).get("name"):
                found.add(spec["model"]["name"])
            if doc.get("kind") == "ModelArtifact":
                found.add(((spec.get("source") or {}).get("huggingFace") or {}).get("repository"))
    return sorted(r for r in found if r)


def _demo(server: HubServer) -> None:
    for repo in ("demo/tiny-model", *example_repositories()):
        if server.repos.load(repo) is not None:
            continue
        server.repos.create(repo)
        server.repos.commit(
            repo,
            {
                "config.json": b'{"architectures": ["TinyForCausalLM"], "hidden_size": 64}\n',
                "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n',
                "model.safetensors": bytes(range(256)) * 4096,
            },
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hub", description=__doc__)
    parser.add_argument("--root", required=True, type=Path, help="repository directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--cdn-host", default="localhost", help="host name LFS redirects point at")
    parser.add_argument("--cdn-port", type=int, help="a second port for LFS redirects (another origin)")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--demo", action="store_true", help="write demo/tiny-model first")
    args = parser.parse_args(argv)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    server = HubServer(
        args.root,
        host=args.host,
        port=args.port,
        page_size=args.page_size,
        cdn_host=args.cdn_host,
        cdn_port=args.cdn_port,
        tls=tls,
    )
    if args.demo:
        _demo(server)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"local hub serving {args.root} at {server.endpoint}", flush=True)
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
