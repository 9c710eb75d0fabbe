"""Generate the Python gRPC modules of the copied ``.proto`` files (a build step).

    python -m nodeplugins.protos.generate           # writes only what is out of date
    python -m nodeplugins.protos.generate --force

Outputs sit beside each ``.proto`` (``api_pb2.py``, ``api_pb2_grpc.py``, ``api_pb2.pyi``) and import
each other by their package path, because the include root is the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository root: proto paths start with nodeplugins/protos/
PROTOS = (
    "kubelet/deviceplugin/v1beta1/api.proto",
    "kubelet/pluginregistration/v1/api.proto",
    "kubelet/podresources/v1/api.proto",
    "csi/v1/csi.proto",
)


def outputs(proto: Path) -> list[Path]:
    stem = proto.with_suffix("")
    return [Path(f"{stem}_pb2.py"), Path(f"{stem}_pb2_grpc.py"), Path(f"{stem}_pb2.pyi")]


def stale(proto: Path) -> bool:
    mtime = proto.stat().st_mtime
    return any(not out.exists() or out.stat().st_mtime < mtime for out in outputs(proto))


def generate(force: bool = False) -> list[Path]:
    """Run ``grpc_tools.protoc`` for every out-of-date file; returns the files it generated."""
    from grpc_tools import protoc  # build-time only: grpcio-tools

    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    done = []
    for relative in PROTOS:
        proto = HERE / relative
        if not force and not stale(proto):
            continue
        args = [
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"-I{well_known}",
            f"--python_out={ROOT}",
            f"--grpc_python_out={ROOT}",
            f"--pyi_out={ROOT}",
            str(proto.relative_to(ROOT)),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed for {proto}")
        done.append(proto)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="regenerate even when up to date")
    args = parser.parse_args(argv)
    for proto in generate(force=args.force):
        print(f"generated {proto.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
