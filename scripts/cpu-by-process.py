#!/usr/bin/env python3
"""CPU seconds per kind of process while a command runs (docs/testing.md, "What would cut it
further"): where `make test`'s two cores go.

    scripts/cpu-by-process.py [--interval 1] [--top 30] -- make test

Reads every process's CPU time from /proc once per interval while the command runs, counting for
each process what it spent after the command started (a process alive before counts from its value
then), and groups processes by a short name: the executable, or for Python the module or script it
runs. A process that starts and ends between two reads is missed (its parent's reaped-children time
is not counted either, so the table's sum falls short of the machine's busy seconds, printed first).
Prints a Markdown table; the command's exit status is this script's.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """User, nice, system, irq and softirq time of the whole machine so far."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / HZ


def name_of(comm: str, argv: list[str]) -> str:
    """A short name for a process: ``kube-apiserver``, ``python -m gpustack_operator worker``..."""
    if not argv or "python" not in os.path.basename(argv[0]):
        return comm
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[1:]
    if args[:1] == ["-m"] and len(args) > 1:
        words = [args[1]] + [a for a in args[2:3] if not a.startswith("-")]
        return "python -m " + " ".join(words)
    if args[:1] == ["-c"]:
        return (
            "python -c ("
            + ("xdist worker" if "execnet" in " ".join(args[1:2]) or "exec(" in args[1] else "inline")
            + ")"
        )
    if args:
        return "python " + os.path.basename(args[0])
    return "python"


def read(pid: str) -> tuple[str, float, str] | None:
    """(comm, CPU seconds, start time) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return comm, (int(fields[11]) + int(fields[12])) / HZ, fields[19]


def argv_of(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")

    first: dict[tuple[str, str], float] = {}  # (pid, start) -> CPU when first seen
    last: dict[tuple[str, str], float] = {}
    names: dict[tuple[str, str], str] = {}
    before: set[tuple[str, str]] = set()

    def sample(initial: bool = False) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            got = read(pid)
            if got is None:
                continue
            comm, cpu, start = got
            key = (pid, start)
            if key not in first:
                first[key] = cpu if initial else 0.0
                names[key] = name_of(comm, argv_of(pid))
                if initial:
                    before.add(key)
            last[key] = cpu

    sample(initial=True)
    busy0, started = busy_seconds(), time.monotonic()
    child = subprocess.Popen(command)
    while child.poll() is None:
        sample()
        time.sleep(args.interval)
    sample()
    busy, wall = busy_seconds() - busy0, time.monotonic() - started

    per_name: dict[str, float] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for key, cpu in last.items():
        spent = cpu - first[key]
        if spent > 0:
            per_name[names[key]] += spent
            count[names[key]] += 1
    counted = sum(per_name.values())
    print(f"\n{wall:.0f} s of wall time, {busy:.0f} CPU-seconds busy, {counted:.0f} of them counted below\n")
    print("| process | count | CPU s |")
    print("|---|---|---|")
    for name, spent in sorted(per_name.items(), key=lambda kv: -kv[1])[: args.top]:
        shown = re.sub(r"\|", "/", name)
        print(f"| {shown} | {count[name]} | {spent:.1f} |")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
