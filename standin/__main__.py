"""``python -m standin vllm serve …`` / ``python -m standin sglang --model-path …`` /
``python -m standin vllm-router …`` (the stand-in router, ``standin/router.py``).

The image's ``vllm`` program and ``sglang.launch_server`` module call this with the engine's name.
A refused line exits 2 with the engine's message, as the engines' argument parsers do; weights that
are not a model exit 1.
"""

from __future__ import annotations

import logging
import sys

from standin import cli, router_cli, weights


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == router_cli.PROGRAM:
        from standin import router

        return router.main(args[1:])
    if not args or args[0] not in (cli.VLLM, cli.SGLANG):
        print("usage: python -m standin {vllm|sglang|vllm-router} ARGS...", file=sys.stderr)
        return 2
    engine, rest = args[0], args[1:]
    try:
        launch = cli.parse(engine, rest)
    except cli.Refused as refusal:
        print(refusal, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format=f"{engine}-standin %(levelname)s %(message)s")
    log = logging.getLogger("standin")
    log.info("serving %s as %s (role %s) on %s:%d", launch.model, ", ".join(launch.names), launch.role,
             launch.host, launch.port)  # fmt: skip
    try:
        model = weights.resolve(launch.model, launch.value("--revision"))
    except cli.Refused as refusal:
        print(f"{engine}: {refusal}", file=sys.stderr)
        return 1
    log.info("weights: %d files, %d bytes under %s", model.weight_files, model.weight_bytes, model.path)
    import uvicorn

    from standin.server import app

    uvicorn.run(app(launch, model), host=launch.host, port=launch.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
