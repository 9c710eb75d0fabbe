"""The Pod webhooks' cost per review without the HTTP stack: ours against Kueue's, in process.

    python -m loadtests.bench_inprocess [--seconds 3] [--rounds 3]

``make bench`` measures both servers over TLS (issue 34 asks ours to answer Pod validate at 2x
Kueue's per CPU-second), where the HTTP and TLS stack costs ours more than its decisions. This
benchmark takes the servers away and times what each webhook itself does per review, on the same
AdmissionReview bodies (``loadtests.mix``, the Pods ``make bench`` sends both):

- ours: the endpoints ``gpustack-operator worker`` serves (``webhooks.server.create_app`` over the
  mix's objects), called in this process without a socket as the connection's fast lane calls
  them: decode, decide, encode;
  ``/null`` (decode and answer) is its floor, and the ModelDeployment webhook (no Kueue twin) is
  timed on the mix's ModelDeployment reviews beside them;
- Kueue's: its ``pod.SetupWebhook`` handlers called through controller-runtime's admission handler
  over the webhook server's own mux, in a Go program built from the Kueue module the local cluster
  pins (``tests/cluster/kueue/benchcmd/pod-webhook``, built once into ``~/.cache``): decode,
  decide, encode (and, mutating, the JSON patch).

Each side's process CPU per review (every thread, so Go's garbage collector counts), medians of
interleaved rounds, one JSON line per case and a last summary line with the ratios. It asserts
nothing about speed; it refuses to report when an answer is not the one expected (a side that
answered nothing, or refused the mix's valid Pods, would look fast).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from loadtests import bench, gobuild, mix, series
from webhooks.server import NULL_PATH

REPO = Path(__file__).resolve().parents[1]
KUEUE_MODULE = REPO / "tests" / "cluster" / "kueue"
PROGRAM = "benchcmd/pod-webhook"
OURS = {
    "validate": bench.POD_PATH,
    "mutate": bench.POD_MUTATE_PATH,
    "null": NULL_PATH,
    "md": bench.MD_PATH,  # no Kueue twin
}
KUEUE = {"validate": bench.KUEUE_VALIDATE_PATH, "mutate": bench.KUEUE_MUTATE_PATH}


def kueue_program() -> Path:
    """The Go program, built once per content of its source and the Kueue module's pins."""
    return gobuild.built(KUEUE_MODULE, PROGRAM)


class InProcess:
    """Our webhook endpoints called without a socket, as the connection's fast lane calls them for
    each review (``AdmissionEndpoint.answer``: decode, decide, encode)."""

    def __init__(self, objects: Path) -> None:
        from webhooks.lookups import FileLookups
        from webhooks.server import create_app

        self.app = create_app(FileLookups.from_directory(str(objects)), include_null=True)
        self.loop = asyncio.new_event_loop()

    def call(self, path: str, body: bytes) -> tuple[int, bytes]:
        status, _, payload = self.loop.run_until_complete(self.app.whole_body[path.encode()].answer(body))
        return status, payload

    def time(self, path: str, bodies: list[bytes], seconds: float) -> dict[str, Any]:
        """Reviews answered and process CPU per review over about ``seconds``, in one coroutine."""
        endpoint = self.app.whole_body[path.encode()]

        async def rounds() -> int:
            reviews, deadline = 0, time.monotonic() + seconds
            while time.monotonic() < deadline:
                for body in bodies:
                    await endpoint.answer(body)
                reviews += len(bodies)
            return reviews

        cpu0, wall0 = time.process_time(), time.monotonic()
        reviews = self.loop.run_until_complete(rounds())
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        return {
            "reviews": reviews,
            "cpu_seconds": cpu,
            "wall_seconds": wall,
            "cpu_us_per_review": 1e6 * cpu / reviews,
        }


def check_ours(server: InProcess, verb: str, bodies: list[bytes]) -> dict[str, int]:
    """How our answers read: every one well-formed, none an internal error."""
    allowed = patched = 0
    for body in bodies:
        status, raw = server.call(OURS[verb], body)
        if status != 200:
            raise SystemExit(f"ours {verb}: HTTP {status}: {raw[:300]!r}")
        answer = orjson.loads(raw)["response"]
        if not answer["allowed"] and answer["status"]["code"] >= 500:
            raise SystemExit(f"ours {verb}: an internal error: {answer['status']['message']}")
        allowed += answer["allowed"]
        patched += bool(answer.get("patch"))
    return {"allowed": allowed, "patched": patched}


def run_kueue(binary: Path, verb: str, files: list[Path], seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(binary),
            "-path",
            KUEUE[verb],
            "-seconds",
            str(seconds),
            "-namespace",
            mix.NAMESPACE,
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120 + seconds,
    )
    if done.returncode != 0:
        raise SystemExit(f"Kueue's {verb} webhook in process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per case and round (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians (default 3)")
    series.add_argument(parser)
    args = parser.parse_args(argv)

    binary = kueue_program()
    work = Path(tempfile.mkdtemp(prefix="gpustack-inprocess-"))
    objects = mix.write_objects(work / "objects")
    bodies = mix.bodies("pod")
    files = []
    for index, body in enumerate(bodies):
        files.append(work / f"pod-{index}.json")
        files[-1].write_bytes(body)

    md_bodies = mix.bodies("md")
    server = InProcess(objects)
    answers = {verb: check_ours(server, verb, bodies) for verb in ("validate", "mutate")}
    answers["md"] = check_ours(server, "md", md_bodies)
    # Kueue answers the mix's Pods (valid, in a managed namespace, each with a queue name) by
    # allowing every one and, mutating, gating every one; ours allows the valid ones of the mix.
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for verb in ("null", "validate", "mutate", "md"):
            reviews = md_bodies if verb == "md" else bodies
            runs.setdefault(f"ours_{verb}", []).append(server.time(OURS[verb], reviews, args.seconds))
        for verb in ("validate", "mutate"):
            got = run_kueue(binary, verb, files, args.seconds)
            expected_patched = len(bodies) if verb == "mutate" else 0
            if got["allowed"] != len(bodies) or got["patched"] != expected_patched:
                raise SystemExit(f"Kueue's {verb} webhook answered unexpectedly: {got}")
            runs.setdefault(f"kueue_{verb}", []).append(got)

    rows: list[dict[str, Any]] = []
    medians: dict[str, float] = {}
    for case, passes in runs.items():
        medians[case] = statistics.median(p["cpu_us_per_review"] for p in passes)
        row = {
            "case": case,
            "bodies": len(md_bodies if case == "ours_md" else bodies),
            "reviews": sum(p["reviews"] for p in passes),
            "cpu_us_per_review": round(medians[case], 2),
            **(
                {"answers": answers[case.split("_", 1)[1]]}
                if case in ("ours_validate", "ours_mutate", "ours_md")
                else {}
            ),
        }
        rows.append(row)
        print(json.dumps(row))
    summary = {
        "summary": "in process, CPU per review",
        **{f"{case}_us": round(value, 2) for case, value in medians.items()},
        # Above 1: ours costs less per review than Kueue's.
        "vs_kueue_validate": round(medians["kueue_validate"] / medians["ours_validate"], 3),
        "vs_kueue_mutate": round(medians["kueue_mutate"] / medians["ours_mutate"], 3),
        "ours_validate_over_null_us": round(medians["ours_validate"] - medians["ours_null"], 2),
    }
    rows.append(summary)
    print(json.dumps(summary))
    series.write(args.series_out, "bench_inprocess", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
