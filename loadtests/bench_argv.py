"""Benchmark of the engine command-line reader: compiled extension against its interpreted source.

Run ``python -m loadtests.bench_argv`` (after ``python setup.py build_ext --inplace``); the project
benchmark imports ``bench_argv()``.  The workload is what the ModelDeployment webhook does for one
role of one request: read the degrees (with the env fallback), find owned args, read ``--port`` and
compute the width — on realistic engine command lines of 60 to 200 entries.
"""

from __future__ import annotations

import json
import random
import sys
import time

from api.engines import ARTIFACT_OWNED_ARGS, ENGINE_SGLANG, ENGINE_VLLM, owned_args
from fastpath import pure

_VLLM_OPTIONS = [
    ("--max-model-len", "32768"),
    ("--gpu-memory-utilization", "0.92"),
    ("--enable-prefix-caching", None),
    ("--max-num-seqs", "256"),
    ("--max-num-batched-tokens", "8192"),
    ("--disable-log-requests", None),
    ("--trust-remote-code", None),
    ("--dtype", "bfloat16"),
    ("--chat-template", "/etc/templates/chat.jinja"),
    ("--tool-call-parser", "hermes"),
    ("--enable-auto-tool-choice", None),
    ("--swap-space", "16"),
    ("--block-size", "16"),
    ("--seed", "0"),
    ("--load-format", "safetensors"),
    ("--quantization", "fp8"),
    ("--compilation-config", '{"level": 3, "cudagraph_capture_sizes": [1, 2, 4, 8]}'),
    ("--limit-mm-per-prompt", '{"image": 4}'),
    ("--reasoning-parser", "deepseek_r1"),
    ("--scheduling-policy", "priority"),
    ("--max_num_partial_prefills", "2"),
    ("--enable-chunked-prefill", None),
    ("--uvicorn-log-level", "warning"),
    ("--api-key", "sk-test"),
    ("--override-generation-config", '{"temperature": 0.6}'),
    ("--distributed-executor-backend", "mp"),
]
_VLLM_DEGREES = [
    ["-tp", "4"],
    ["--pipeline_parallel_size=2"],
    ["-dp", "2"],
    ["--data-parallel-size-local", "1"],
    ["--enable-expert-parallel"],
    ["-dcp", "2"],
    ["--tensor-parallel-size", "8"],
]
_SGLANG_OPTIONS = [
    ("--mem-fraction-static", "0.88"),
    ("--context-length", "32768"),
    ("--chunked-prefill-size", "8192"),
    ("--max-running-requests", "256"),
    ("--trust-remote-code", None),
    ("--schedule-policy", "lpm"),
    ("--attention-backend", "fa3"),
    ("--cuda-graph-max-bs", "160"),
    ("--enable-metrics", None),
    ("--log-level", "warning"),
    ("--tool-call-parser", "qwen25"),
    ("--reasoning-parser", "qwen3"),
    ("--kv-cache-dtype", "fp8_e5m2"),
    ("--quantization", "fp8"),
    ("--random-seed", "1"),
    ("--json-model-override-args", '{"rope_scaling": null}'),
]
_SGLANG_DEGREES = [
    ["--tp-size", "4"],
    ["--dp", "2"],
    ["--enable-dp-attention"],
    ["--ep-size=8"],
    ["--pp-size", "2"],
]


def _command_line(rng: random.Random, engine: str) -> list[str]:
    if engine == ENGINE_VLLM:
        argv = ["vllm", "serve", "/var/lib/gpustack/model", "--served-model-name", "qwen-chat"]
        options, degrees = _VLLM_OPTIONS, _VLLM_DEGREES
        owned = [["--kv-transfer-config", json.dumps({"kv_connector": "X", "kv_role": "kv_both"})]]
    else:
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/var/lib/gpustack/model"]
        options, degrees = _SGLANG_OPTIONS, _SGLANG_DEGREES
        owned = [["--disaggregation-mo", "prefill"]]
    target = rng.randint(60, 200)
    groups: list[list[str]] = []
    for flags in rng.sample(degrees, k=min(len(degrees), rng.randint(3, 5))):
        groups.append(list(flags))
    if rng.random() < 0.5:
        groups.extend(owned)
    size = len(argv) + sum(len(g) for g in groups)
    while size < target:
        flag, value = rng.choice(options)
        if rng.random() < 0.3 and value is not None:
            group = [f"{flag}={value}"]
        else:
            group = [flag] if value is None else [flag, value]
        groups.append(group)
        size += len(group)
    rng.shuffle(groups)
    groups.append(["--host", "0.0.0.0", "--port", str(rng.randint(8000, 9000))])
    for group in groups:
        argv.extend(group)
    return argv


def workload(seed: int = 7, count: int = 64) -> list[tuple[str, list[str], dict[str, str]]]:
    rng = random.Random(seed)
    out = []
    for k in range(count):
        engine = ENGINE_VLLM if k % 3 else ENGINE_SGLANG
        env = {"VLLM_DP_SIZE": "2"} if k % 5 == 0 else {}
        out.append((engine, _command_line(rng, engine), env))
    return out


def _owned(engine: str) -> frozenset[str]:
    return owned_args(engine, kv_cache_dtype_owned=True) | ARTIFACT_OWNED_ARGS[engine]


def _run(module, cases, owned_sets, rounds: int) -> float:
    parse_degrees = module.parse_degrees
    find_owned_args = module.find_owned_args
    read_port = module.read_port
    width = module.width
    start = time.perf_counter()
    for _ in range(rounds):
        for engine, argv, env in cases:
            degrees = parse_degrees(engine, argv, env)
            find_owned_args(engine, argv, owned_sets[engine])
            read_port(engine, argv)
            width(engine, degrees)
    return time.perf_counter() - start


def bench_argv(rounds: int = 20, repeat: int = 5) -> dict:
    """Seconds for ``rounds`` passes over 64 command lines, compiled and interpreted (best of
    ``repeat``), and their ratio.  Raises if the compiled extension is not built."""
    reader = ("argv", "degrees")  # token recognition and the degree tables
    for module in pure.modules(reader):
        if not pure.is_compiled(module):
            raise RuntimeError(
                f"{module.__name__} is not compiled: run `python setup.py build_ext --inplace`"
            )
    compiled = pure.bundle(reader)
    interpreted = pure.bundle(reader, interpreted=True)
    cases = workload()
    owned_sets = {engine: _owned(engine) for engine in (ENGINE_VLLM, ENGINE_SGLANG)}
    for engine, argv, env in cases:  # same answers before timing anything
        assert compiled.parse_degrees(engine, argv, env) == compiled.parse_degrees(engine, argv, env)
        assert (
            compiled.parse_degrees(engine, argv, env).to_dict()
            == interpreted.parse_degrees(engine, argv, env).to_dict()
        )
    _run(compiled, cases, owned_sets, 1)
    _run(interpreted, cases, owned_sets, 1)
    compiled_s = min(_run(compiled, cases, owned_sets, rounds) for _ in range(repeat))
    interpreted_s = min(_run(interpreted, cases, owned_sets, rounds) for _ in range(repeat))
    tokens = sum(len(argv) for _, argv, _ in cases)
    calls = rounds * len(cases)
    return {
        "compiled_s": compiled_s,
        "interpreted_s": interpreted_s,
        "speedup": interpreted_s / compiled_s,
        "roles": calls,
        "mean_tokens": tokens / len(cases),
        "compiled_us_per_role": compiled_s / calls * 1e6,
        "interpreted_us_per_role": interpreted_s / calls * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="the engine command-line reader, compiled vs interpreted")
    parser.add_argument("--rounds", type=int, default=20, help="passes over the 64 command lines")
    parser.add_argument("--repeat", type=int, default=5, help="timings taken, best kept")
    args = parser.parse_args(argv)
    result = bench_argv(args.rounds, args.repeat)
    print(
        f"argv reader: {result['roles']} roles, {result['mean_tokens']:.0f} entries each on average\n"
        f"  compiled     {result['compiled_s']:.4f} s  ({result['compiled_us_per_role']:.1f} µs/role)\n"
        f"  interpreted  {result['interpreted_s']:.4f} s  ({result['interpreted_us_per_role']:.1f} µs/role)\n"
        f"  speedup      {result['speedup']:.1f}×"
    )
    print(json.dumps({"bench": "argv", **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
