"""Fill charts/gpustack-operator/charts/ with the chart's dependencies (Chart.yaml: Kueue and Node
Feature Discovery) without reaching their chart repositories: each is packaged from the Go module its
binaries are built from here (tests/cluster/kueue, tests/cluster/nfd), with the two edits their
upstream releases make when they publish a chart — the chart version, and Kueue's image names (its
source tree names the staging registry and branch tag; the published chart names
registry.k8s.io/kueue/kueue:<version>). With network access, `helm dependency build` fetches the same
charts from the repositories Chart.yaml names.

    .venv/bin/python scripts/chart-dependencies.py                # no-op when the packages are there
    .venv/bin/python scripts/chart-dependencies.py --kueue-config # rewrite values.yaml's copy of the
                                                                  # Kueue configuration the chart renders

A dependency whose module is not in tests/cluster at the version Chart.yaml asks for is an error
naming both versions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gpustack-operator"
CLUSTER = REPO / "tests" / "cluster"
# name -> (Go module dir in tests/cluster, module path, chart directory inside the module)
SOURCES = {
    "kueue": ("kueue", "sigs.k8s.io/kueue", "charts/kueue"),
    "node-feature-discovery": (
        "nfd",
        "sigs.k8s.io/node-feature-discovery",
        "deployment/helm/node-feature-discovery",
    ),
}
KUEUE_STAGING = "us-central1-docker.pkg.dev/k8s-staging-images/kueue/"


def _module(directory: str, path: str) -> tuple[str, Path]:
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local")}
    out = subprocess.run(
        ["go", "mod", "download", "-json", path],
        cwd=CLUSTER / directory,
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"chart-dependencies: go mod download {path} failed: {out.stderr.strip()[-300:]}")
    found = json.loads(out.stdout)
    return found["Version"], Path(found["Dir"])


def _helm() -> Path:
    out = subprocess.run(["bash", str(CLUSTER / "build.sh"), "--bin-dir"], capture_output=True, text=True)
    helm = Path(out.stdout.strip()) / "helm"
    if not helm.is_file():
        raise SystemExit("chart-dependencies: no helm binary yet: run `make cluster-binaries`")
    return helm


def package(name: str, version: str, out_dir: Path, helm: Path) -> Path:
    target = out_dir / f"{name}-{version}.tgz"
    if target.exists():
        return target
    directory, module, inside = SOURCES[name]
    module_version, source = _module(directory, module)
    if module_version.lstrip("v") != version:
        raise SystemExit(
            f"chart-dependencies: Chart.yaml wants {name} {version}, tests/cluster/{directory} pins {module_version}"
        )
    with tempfile.TemporaryDirectory(prefix=f"chart-{name}-") as tmp:
        chart = Path(tmp) / name
        shutil.copytree(source / inside, chart)
        chart.chmod(0o755)
        for path in chart.rglob("*"):  # the module cache is read-only
            path.chmod(0o755 if path.is_dir() else 0o644)
        if name == "kueue":  # what Kueue's release does to the chart it publishes
            values = chart / "values.yaml"
            text = values.read_text().replace(KUEUE_STAGING, "registry.k8s.io/kueue/")
            branch = f"release-{'.'.join(version.split('.')[:2])}"
            values.write_text(text.replace(f"tag: {branch}", f"tag: v{version}"))
        out_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [
                str(helm),
                "package",
                str(chart),
                "--version",
                version,
                "--app-version",
                f"v{version}",
                "-d",
                str(out_dir),
            ],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp},
        )
        if proc.returncode != 0:
            raise SystemExit(f"chart-dependencies: helm package {name}: {proc.stderr.strip()}")
    return target


def rendered_kueue_config(helm: Path) -> dict:
    """The Kueue configuration the chart renders (ConfigMap <fullname>-kueue-manager-config) for its
    default values."""
    with tempfile.TemporaryDirectory(prefix="chart-render-") as tmp:
        proc = subprocess.run(
            [str(helm), "template", "gpustack-operator", str(CHART), "-n", "gpustack-system",
             "--show-only", "templates/kueue/manager-config.yaml"],
            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": tmp},
        )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"chart-dependencies: helm template: {proc.stderr.strip()}")
    config_map = yaml.safe_load(proc.stdout)
    return json.loads(config_map["data"]["controller_manager_config.yaml"])


MARK = "    controllerManagerConfigYaml: |\n"


def write_kueue_config(helm: Path) -> None:
    values = CHART / "values.yaml"
    text = values.read_text()
    head, rest = text.split(MARK, 1)
    lines = rest.splitlines(keepends=True)
    tail_at = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.startswith("      ")), len(lines)
    )
    while tail_at > 0 and not lines[tail_at - 1].strip():  # the blank lines before the next key stay
        tail_at -= 1
    body = yaml.safe_dump(rendered_kueue_config(helm), sort_keys=False, width=120)
    block = "".join(f"      {line}\n" for line in body.splitlines())
    values.write_text(head + MARK + block + "".join(lines[tail_at:]))


def main() -> int:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    helm = _helm()
    if "--kueue-config" in sys.argv[1:]:
        write_kueue_config(helm)
        return 0
    for dependency in meta.get("dependencies") or []:
        print(package(dependency["name"], dependency["version"], CHART / "charts", helm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
