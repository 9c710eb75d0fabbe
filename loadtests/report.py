"""Render the benchmarks' series as PNG plots (``make bench-report``).

    python -m loadtests.report [--series .dev/bench-series] [--out .dev/bench-report]

Reads the files the benchmarks write with ``--series-out`` (:mod:`loadtests.series`) and draws,
with matplotlib's Agg backend (no display needed), one PNG per figure whose series is there:

- ``modeldeployment.png``: the ModelDeployment controller's CPU per reconcile and its apply-to-Ready
  time against the number of deployments (``bench_modeldeployment cluster``, one run per size);
- ``pools.png``: the pools' convergence times against the node count (``bench_pools``, one run
  per ``--nodes``);
- ``webhooks.png``: latency percentiles per webhook endpoint (``bench``, i.e. ``make bench``);
- ``gate3.png``: gate 3's decision time per Workload against the pool's size (``bench_gate3``);
- ``devicemanager.png``: the device plugins' calls as the caller sees them (``bench_devicemanager``);
- ``fastpath.png``: the compiled hot paths against their interpreted twins (``bench_fastpath``).

A figure whose series is missing is named on stderr with the command that writes it, and the
others are still drawn; the exit status is 1 only when a series is there but cannot be drawn.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: files only, no display

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadtests import series

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / ".dev" / "bench-report"
Docs = list[dict[str, Any]]


def _caption(docs: Docs) -> str:
    """The machine and date of the newest file a figure was drawn from."""
    newest = max(docs, key=lambda d: str(d.get("written") or ""))
    m = newest.get("machine") or {}
    cpu = str(m.get("cpu") or "").replace("(R)", "").replace("(TM)", "")
    return (
        f"{m.get('cpus', '?')} CPUs {cpu}".strip()
        + f", 1-min load {m.get('loadavg_1m', '?')} as it ended; {str(newest.get('written', ''))[:10]}"
    )


def _figure(
    docs: Docs, title: str, columns: int = 1, ratios: list[float] | None = None
) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(6.4 * columns, 4.4), layout="constrained")
    axes = fig.subplots(1, columns, squeeze=False, width_ratios=ratios)[0].tolist()
    fig.suptitle(f"{title}\n{_caption(docs)}", fontsize=10)
    return fig, axes


def _first(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    raise KeyError(f"no row with {match}")


def _value(rows: list[dict[str, Any]], key: str) -> Any:
    """The first value of ``key`` in any row (``None`` when no row has it)."""
    return next((row[key] for row in rows if row.get(key) is not None), None)


def plot_modeldeployment(docs: Docs) -> Figure:
    runs = [d for d in docs if str(d.get("tag") or "").startswith("cluster-")]
    if not runs:
        raise KeyError("no cluster run (only render runs)")
    by_pool: dict[str, list[tuple[int, float, float]]] = {}
    for doc in runs:
        ready = _first(doc["rows"], figure="ready")
        cost = _first(doc["rows"], figure="cpu_per_reconcile_ms")
        by_pool.setdefault(str(ready.get("pool") or "h100"), []).append(
            (int(ready["deployments"]), float(cost["ms"]), float(ready["seconds"]))
        )
    fig, (left, right) = _figure(runs, "ModelDeployment controller against fleet size", 2)
    for pool, points in sorted(by_pool.items()):
        points.sort()
        xs = [p[0] for p in points]
        left.plot(xs, [p[1] for p in points], marker="o", label=f"{pool} pool")
        right.plot(xs, [p[2] for p in points], marker="o", label=f"{pool} pool")
    left.set(xlabel="deployments", ylabel="CPU per reconcile (ms)", title="cost per reconcile")
    right.set(xlabel="deployments", ylabel="seconds", title="first apply to every deployment Ready")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    return fig


POOL_FIGURES = (
    ("build", "status_converged_after_last_write_s", "InstanceType status"),
    ("build", "queue_converged_after_last_write_s", "ClusterQueue nominal"),
    ("build", "node_keys_on_every_node_after_last_write_s", "node counting keys"),
    ("burst", "status_converged_after_last_write_s", "every ledger rewritten → status"),
    ("single", "status_converged_after_write_s", "one card freed → status"),
)


def plot_pools(docs: Docs) -> Figure:
    points: dict[str, list[tuple[int, float]]] = {label: [] for _p, _k, label in POOL_FIGURES}
    for doc in docs:
        rows = doc["rows"]
        nodes = int(_first(rows, phase="setup")["nodes"])
        for phase, key, label in POOL_FIGURES:
            value = _value([r for r in rows if r.get("phase") == phase], key)
            if value is not None:
                points[label].append((nodes, float(value)))
    fig, (ax,) = _figure(docs, "Pools: convergence after the last write, against node count")
    for label, xy in points.items():
        if xy:
            xy.sort()
            ax.plot([p[0] for p in xy], [p[1] for p in xy], marker="o", label=label)
    ax.set(xlabel="nodes (8 cards each)", ylabel="seconds")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _bars(ax: Axes, groups: list[str], series_: dict[str, list[float]]) -> None:
    width = 0.8 / max(1, len(series_))
    for i, (label, values) in enumerate(series_.items()):
        xs = [g + (i - (len(series_) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def plot_webhooks(docs: Docs) -> Figure:
    doc = max(docs, key=lambda d: str(d.get("written") or ""))
    rows = [r for r in doc["rows"] if "endpoint" in r]
    if not rows:
        raise KeyError("no endpoint rows")
    fig, (ax,) = _figure([doc], "Admission webhooks: latency per endpoint (wrk, one uvicorn worker, TLS)")
    groups = [f"{r['endpoint']}\n{r['rps']:,.0f} req/s" for r in rows]
    _bars(ax, groups, {q: [float(r[f"{q}_ms"]) for r in rows] for q in ("p50", "p90", "p99")})
    ax.set(ylabel="ms")
    return fig


def plot_gate3(docs: Docs) -> Figure:
    newest: dict[tuple[str, int], dict[str, Any]] = {}
    for doc in sorted(docs, key=lambda d: str(d.get("written") or "")):
        for row in doc["rows"]:
            newest[(str(row["scenario"]), int(row["nodes"]))] = row  # a later run at a size wins
    fig, (ax,) = _figure(docs, "Gate 3: decision per Workload against pool size (median)")
    for scenario in sorted({s for s, _n in newest}):
        rows = sorted((n, r) for (s, n), r in newest.items() if s == scenario)
        xs = [n for n, _r in rows]
        cached = [(n, float(r["informer_ms"])) for n, r in rows if "informer_ms" in r]
        if cached:  # the controller's path: the Pod cache, a Ready confirmed on uncached reads
            line = ax.plot(
                [n for n, _ in cached], [ms for _, ms in cached], marker="o", label=f"{scenario}, Pod cache"
            )
            style: dict[str, Any] = {"linestyle": ":", "color": line[0].get_color()}
        else:
            style = {"marker": "o"}
        ax.plot(
            xs, [float(r["median_ms"]) for _n, r in rows], label=f"{scenario}, one list of every Pod", **style
        )
    ax.set(xlabel="nodes in the pool", ylabel="ms per decision")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_devicemanager(docs: Docs) -> Figure:
    doc = max(docs, key=lambda d: str(d.get("written") or ""))
    rows = [
        r for r in doc["rows"] if r.get("case", "").split("-")[0] in ("preferred", "allocate", "admission")
    ]
    if not rows:
        raise KeyError("no gRPC rows")
    one = [r for r in rows if int(r.get("concurrency", 1)) == 1]
    stress = [r for r in rows if int(r.get("concurrency", 1)) != 1]
    panels = [(one, "one caller (the kubelet's shape)")] if one else []
    panels += [(stress, f"{stress[0]['concurrency']} callers at once (stress)")] if stress else []
    title = "Device plugins: calls as the kubelet's side sees them"
    fig, axes = _figure([doc], title, len(panels), [len(p[0]) + 1 for p in panels])
    fig.set_size_inches(max(6.4, 1.0 * len(rows) + 1), 4.6)
    for ax, (subset, name) in zip(axes, panels, strict=True):
        if subset is one:
            ax.axhline(2.0, color="grey", linestyle="--", linewidth=1, label="Allocate target, p99")
        groups = [str(r["case"]).replace("-", "\n") for r in subset]
        _bars(ax, groups, {q: [float(r[f"{q}_ms"]) for r in subset] for q in ("p50", "p99")})
        ax.set(ylabel="ms", title=name)
    return fig


def plot_fastpath(docs: Docs) -> Figure:
    doc = max(docs, key=lambda d: str(d.get("written") or ""))
    (results,) = doc["rows"][-1:]
    names = [name for name, figures in results.items() if isinstance(figures, dict) and "speedup" in figures]
    if not names:
        raise KeyError("no speedups")
    fig, (ax,) = _figure([doc], "fastpath: compiled against interpreted, same inputs")
    bars = ax.bar(names, [float(results[n]["speedup"]) for n in names])
    ax.bar_label(bars, fmt="%.1fx", fontsize=8)
    ax.axhline(10.0, color="grey", linestyle="--", linewidth=1)
    ax.set(ylabel="speedup (×)")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


@dataclass(frozen=True)
class Plot:
    name: str  # the PNG's stem
    bench: str  # the series it is drawn from
    command: str  # what writes that series
    draw: Callable[[Docs], Figure]


PLOTS = (
    Plot(
        "modeldeployment",
        "bench_modeldeployment",
        "python -m loadtests.bench_modeldeployment cluster --deployments N --series-out DIR (a running cluster)",
        plot_modeldeployment,
    ),
    Plot(
        "pools",
        "bench_pools",
        "python -m loadtests.bench_pools --nodes N --series-out DIR (a running cluster)",
        plot_pools,
    ),
    Plot("webhooks", "bench", "python -m loadtests.bench --series-out DIR", plot_webhooks),
    Plot("gate3", "bench_gate3", "python -m loadtests.bench_gate3 --series-out DIR", plot_gate3),
    Plot(
        "devicemanager",
        "bench_devicemanager",
        "python -m loadtests.bench_devicemanager --series-out DIR",
        plot_devicemanager,
    ),
    Plot("fastpath", "bench_fastpath", "python -m loadtests.bench_fastpath --series-out DIR", plot_fastpath),
)


@dataclass
class Report:
    written: list[Path] = field(default_factory=list)
    missing: list[Plot] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def render(series_dir: Path, out: Path) -> Report:
    found = series.read(series_dir) if series_dir.is_dir() else {}
    out.mkdir(parents=True, exist_ok=True)
    report = Report()
    for plot in PLOTS:
        docs = found.get(plot.bench)
        if not docs:
            report.missing.append(plot)
            continue
        try:
            fig = plot.draw(docs)
        except (KeyError, TypeError, ValueError) as error:
            report.failed[plot.name] = f"{type(error).__name__}: {error}"
            continue
        path = out / f"{plot.name}.png"
        fig.savefig(path, dpi=100, metadata={"Software": None})
        report.written.append(path)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=Path, default=series.DEFAULT_DIR, help="the series files' directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the PNGs go")
    args = parser.parse_args(argv)
    report = render(args.series, args.out)
    for path in report.written:
        print(f"wrote {path}")
    for plot in report.missing:
        print(
            f"missing: {plot.name}.png needs {args.series}/{plot.bench}*.json; write it with: "
            + plot.command.replace("DIR", str(args.series)),
            file=sys.stderr,
        )
    for name, error in report.failed.items():
        print(f"failed: {name}.png: its series does not read as expected ({error})", file=sys.stderr)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
