"""scripts/cpu-by-process.py: the names it groups processes by, and a run that counts a child."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cpu-by-process.py"
spec = importlib.util.spec_from_file_location("cpu_by_process", SCRIPT)
assert spec is not None and spec.loader is not None
cpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cpu)


def test_processes_are_named_by_executable_or_python_module() -> None:
    assert cpu.name_of("kube-apiserver", ["/bin/kube-apiserver", "--v=1"]) == "kube-apiserver"
    assert (
        cpu.name_of(
            "python", ["/x/.venv/bin/python", "-m", "gpustack_operator", "worker", "--kubeconfig", "k"]
        )
        == "python -m gpustack_operator worker"
    )
    assert cpu.name_of("python", ["/usr/bin/python3", "-m", "pytest", "-q"]) == "python -m pytest"
    assert (
        cpu.name_of("python", ["/x/bin/python", "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"])
        == "python -c (xdist worker)"
    )
    assert cpu.name_of("python3", ["python3", "/tmp/tool.py", "a"]) == "python tool.py"
    assert cpu.name_of("bash", []) == "bash"


def test_a_busy_child_is_counted_and_its_status_returned(capsys) -> None:
    burn = "import time\nend = time.process_time() + 2\nwhile time.process_time() < end: pass\nraise SystemExit(3)"
    code = cpu.main(["--interval", "0.2", "--", sys.executable, "-c", burn])
    assert code == 3
    table = capsys.readouterr().out
    (row,) = [line for line in table.splitlines() if line.startswith("| python -c (inline)")]
    assert float(row.rsplit("|", 2)[1]) >= 0.5, table
