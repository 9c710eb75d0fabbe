"""The command line of ``gpustack-operator admit``, apart from :mod:`gpustack_operator.admit` so
that building the parser imports no webhook."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="PATH",
        help="manifests to admit: a YAML/JSON file, a directory (read recursively for *.yaml, *.yml, "
        "*.json) or - for stdin; repeat for several",
    )
    parser.add_argument(
        "-o",
        "--output",
        default="jsonl",
        metavar="FORMAT",
        help="jsonl (default: one JSON line per object, the summary on stderr), json (one document "
        "with results and summary) or text (one line per object, then the summary)",
    )
    parser.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="PATH",
        help="cluster objects the decisions read (InstanceTypes, Settings, ...): a file or a directory; "
        "repeatable; with --kubeconfig they replace or add to the cluster's",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read the cluster objects the decisions need from this cluster (read-only, its current "
        "context) instead of files only",
    )
    parser.add_argument(
        "--operation", choices=["CREATE", "UPDATE"], default="CREATE", help="operation (default CREATE)"
    )
    parser.add_argument(
        "--old",
        action="append",
        default=[],
        metavar="PATH",
        help="for UPDATE: the stored objects (file or directory, repeatable), matched by kind/namespace/name",
    )
    parser.add_argument("--namespace", "-n", default="default", help="namespace of documents that name none")
