"""fastpath.argv: the engine command-line reader, on the spec's own examples (model-deployment.md
§4, §5 rows 14–18, 21, 41, §12; kv-cache.md §3.4 rules 10–11), compiled and interpreted alike."""

from __future__ import annotations

import pytest

from api import engines
from api.constants import RANK_ENV
from fastpath.pure import bundle

# The reader: token recognition (fastpath.argv) and the degree tables (fastpath.degrees).
READER = ("argv", "degrees")
compiled_argv = bundle(READER)
interpreted_argv = bundle(READER, interpreted=True)
BOTH = pytest.mark.parametrize("m", [compiled_argv, interpreted_argv], ids=["compiled", "interpreted"])

VLLM = engines.ENGINE_VLLM
SGLANG = engines.ENGINE_SGLANG
VLLM_OWNED = engines.owned_args(VLLM)
SGLANG_OWNED = engines.owned_args(SGLANG)


def error_flags(degrees) -> list[str]:
    return [flag for flag, _ in degrees.errors]


# --- Owned args (§3, §4.2, §5 #14, §12.1) -------------------------------------------------------------


@BOTH
def test_row14_plain_arg_accepted_underscore_spelling_refused(m) -> None:
    assert m.find_owned_args(VLLM, ["--max-model-len", "8192"], VLLM_OWNED) == []
    assert m.find_owned_args(VLLM, ["--kv_transfer_config={}"], VLLM_OWNED) == [
        (0, "--kv_transfer_config", "--kv-transfer-config")
    ]


@BOTH
@pytest.mark.parametrize(
    ("token", "spelled"),
    [
        ("--kv-transfer-config", "--kv-transfer-config"),
        ("--kv_transfer_config", "--kv_transfer_config"),
        ("--kv-transfer-conf", "--kv-transfer-conf"),
        ("--kv-transfer-config.kv_role=x", "--kv-transfer-config.kv_role"),
        ("--kv_transfer-config={}", "--kv_transfer-config"),
        ("--kv-transfer-config.kv_connector", "--kv-transfer-config.kv_connector"),
    ],
)
def test_vllm_spellings_all_resolve_to_kv_transfer_config(m, token, spelled) -> None:
    """§12.1: every spelling vLLM's parser reads as --kv-transfer-config is refused as it."""
    assert m.resolve_flag(VLLM, token, VLLM_OWNED)[0] == "--kv-transfer-config"
    assert m.find_owned_args(VLLM, ["serve", token, "{}"], VLLM_OWNED) == [
        (1, spelled, "--kv-transfer-config")
    ]


@BOTH
def test_sglang_takes_prefixes_only(m) -> None:
    """§12.1: SGLang neither rewrites '_' nor drops dotted members; it does take unique prefixes."""
    assert m.resolve_flag(SGLANG, "--disaggregation-mo", SGLANG_OWNED) == ("--disaggregation-mode", None)
    assert m.resolve_flag(SGLANG, "--hicache-storage-backend-e=x", SGLANG_OWNED) == (
        "--hicache-storage-backend-extra-config",
        "x",
    )
    assert m.resolve_flag(SGLANG, "--hicache_storage_backend", SGLANG_OWNED) is None
    assert m.resolve_flag(SGLANG, "--hicache-storage-backend.x=1", SGLANG_OWNED) is None
    # The vLLM keys are plain user keys on SGLang and vice versa (§3: ownership is per engine).
    assert m.find_owned_args(SGLANG, ["--kv-transfer-config", "{}"], SGLANG_OWNED) == []
    assert m.find_owned_args(VLLM, ["--hicache-storage-backend", "mooncake"], VLLM_OWNED) == []


@BOTH
def test_exact_owned_spelling_is_never_a_prefix_of_a_longer_owned_key(m) -> None:
    assert m.resolve_flag(SGLANG, "--hicache-storage-backend", SGLANG_OWNED) == (
        "--hicache-storage-backend",
        None,
    )
    assert m.resolve_flag(SGLANG, "--hicache-storage-backend=mooncake", SGLANG_OWNED) == (
        "--hicache-storage-backend",
        "mooncake",
    )


@BOTH
def test_owned_resolution_tests_ambiguity_among_candidates_only(m) -> None:
    # Unique among the owned keys resolves (the engine's full table might disagree: err toward refusing).
    assert m.resolve_flag(VLLM, "--kv-t", VLLM_OWNED) == ("--kv-transfer-config", None)
    assert m.resolve_flag(VLLM, "--kv-e=x", VLLM_OWNED) == ("--kv-events-config", "x")
    # Shared by two owned keys: the engine cannot read it as either.
    assert m.resolve_flag(VLLM, "--kv", VLLM_OWNED) is None
    assert m.resolve_flag(SGLANG, "--disaggregation-", SGLANG_OWNED) is None


@BOTH
def test_owned_check_is_per_entry_and_does_not_stop_at_double_dash(m) -> None:
    args = ["--", "--kv-events-config", "{}", "--max-model-len", "--kv-transfer-config={}"]
    assert m.find_owned_args(VLLM, args, VLLM_OWNED) == [
        (1, "--kv-events-config", "--kv-events-config"),
        (4, "--kv-transfer-config", "--kv-transfer-config"),
    ]


@BOTH
def test_bare_double_dash_and_non_flags_are_never_owned(m) -> None:
    for token in ["--", "-", "", "kv-transfer-config", "x--kv-transfer-config", "--=x"]:
        assert m.resolve_flag(VLLM, token, VLLM_OWNED) is None, token


@BOTH
def test_kv_cache_dtype_conditional(m) -> None:
    """§5 #16: --kv-cache-dtype is owned only while the caller says so."""
    args = ["--kv-cache-dtype=fp8"]
    assert m.find_owned_args(VLLM, args, engines.owned_args(VLLM)) == []
    owned = engines.owned_args(VLLM, kv_cache_dtype_owned=True)
    assert m.find_owned_args(VLLM, args, owned) == [(0, "--kv-cache-dtype", "--kv-cache-dtype")]
    assert m.find_owned_args(VLLM, ["--kv_cache_dtype", "fp8"], owned) == [
        (0, "--kv_cache_dtype", "--kv-cache-dtype")
    ]
    sglang = engines.owned_args(SGLANG, kv_cache_dtype_owned=True)
    assert m.find_owned_args(SGLANG, ["--kv-cache-dt", "fp8"], sglang) == [
        (0, "--kv-cache-dt", "--kv-cache-dtype")
    ]


@BOTH
def test_kv_injector_rule10_scans_the_engine_spellings(m) -> None:
    """kv-cache.md §3.4 rule 10: a vLLM Pod with --kv-transfer-config {...} is refused."""
    pod_argv = ["vllm", "serve", "m", "--kv-transfer-config", '{"kv_connector": "X"}']
    assert [key for _, _, key in m.find_owned_args(VLLM, pod_argv, VLLM_OWNED)] == ["--kv-transfer-config"]


@BOTH
def test_single_dash_candidates_follow_argparse(m) -> None:
    short = frozenset({"-tp", "-n"})
    assert m.resolve_flag(VLLM, "-tp", short) == ("-tp", None)
    assert m.resolve_flag(VLLM, "-tp=2", short) == ("-tp", "2")
    assert m.resolve_flag(VLLM, "-t", short) == ("-tp", None)
    assert m.resolve_flag(VLLM, "-tp2", short) is None
    assert m.resolve_flag(VLLM, "-t=2", short) is None
    assert m.resolve_flag(VLLM, "-n2", short) == ("-n", "2")
    assert m.find_owned_args(VLLM, ["-n2"], short) == [(0, "-n", "-n")]


def test_resolve_flag_rejects_non_flag_candidates() -> None:
    with pytest.raises(ValueError):
        compiled_argv.resolve_flag(VLLM, "--x", {"x"})
    with pytest.raises(ValueError):
        compiled_argv.resolve_flag(VLLM, "--x", {"--"})


# --- Owned env, router-owned flags (api.engines) --------------------------------------------------


def test_row15_owned_env() -> None:
    assert "HF_TOKEN" not in engines.owned_env(VLLM)
    for engine in engines.ENGINES:
        assert set(RANK_ENV) <= engines.owned_env(engine)
    assert "MOONCAKE_CONFIG_PATH" in engines.owned_env(VLLM)
    assert "MOONCAKE_CONFIG_PATH" not in engines.owned_env(SGLANG)
    assert "MOONCAKE_TENANT_ID" in engines.owned_env(SGLANG)
    assert "MOONCAKE_TENANT_ID" not in engines.owned_env(VLLM)
    assert "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH" not in engines.owned_env(VLLM)
    assert engines.owned_key(SGLANG, "MOONCAKE_TENANT_ID").reason == engines.REASON_SECURITY
    assert (
        engines.owned_key(SGLANG, "--hicache-storage-backend-extra-config").reason == engines.REASON_DESTROY
    )
    assert engines.owned_key(VLLM, "--kv-cache-dtype").reason == engines.REASON_CONDITIONAL


def test_owned_table_matches_spec_sizes() -> None:
    assert engines.owned_args(VLLM) == {"--kv-transfer-config", "--kv-events-config"}
    assert engines.owned_args(SGLANG) == {
        "--hicache-storage-backend",
        "--hicache-storage-backend-extra-config",
        "--disaggregation-mode",
        "--disaggregation-transfer-backend",
        "--disaggregation-bootstrap-port",
    }
    assert len(engines.owned_env(VLLM)) == 2 + 3
    assert len(engines.owned_env(SGLANG)) == 1 + 6 + 1 + 3


def test_row41_router_owned_flags() -> None:
    assert engines.router_owned_flag(engines.ROUTER_LLM_D, "--policy") is None
    assert engines.router_owned_flag(engines.ROUTER_LLM_D, "--config-file=/x") == "--config-file"
    assert engines.router_owned_flag(engines.ROUTER_VLLM, "--kv-connector") == "--kv-connector"
    assert engines.router_owned_flag(engines.ROUTER_SGLANG_GATEWAY, "--kv-connector") is None
    assert (
        engines.router_owned_flag(engines.ROUTER_SGLANG_GATEWAY, "--pd-disaggregation")
        == "--pd-disaggregation"
    )
    # By name only: no prefixes.
    assert engines.router_owned_flag(engines.ROUTER_LLM_D, "--config-fil=/x") is None


def test_artifact_owned_keys() -> None:
    assert engines.ARTIFACT_OWNED_ARGS[VLLM] == {
        "--model",
        "--revision",
        "--tokenizer-revision",
        "--download-dir",
    }
    assert engines.ARTIFACT_OWNED_ARGS[SGLANG] == {"--model-path", "--revision", "--download-dir"}
    assert "HF_TOKEN" in engines.ARTIFACT_OWNED_ENV
    assert compiled_argv.find_owned_args(VLLM, ["--revision", "v2"], engines.ARTIFACT_OWNED_ARGS[VLLM]) == [
        (0, "--revision", "--revision")
    ]


# --- Degrees (§4.3–4.4, §5 #17, §12.4–5) -------------------------------------------------------------


@BOTH
def test_row17_readable_degree(m) -> None:
    degrees = m.parse_degrees(VLLM, ["-tp", "2"])
    assert degrees.ok and degrees.tp == 2
    assert degrees.declared == ("--tensor-parallel-size",)


@BOTH
@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["-tp", "two"], "not an integer"),
        (["-tp", "-1"], "less than 1"),
        (["-tp"], "last entry"),
        (["-tp", "--max-model-len", "8"], "read as a flag"),
        (["-tp", "--", "2"], "ends the options"),
        (["-tp", "1.5"], "not an integer"),
        (["-tp", "-1.5"], "not an integer"),
        (["-tp", "9223372036854775808"], "out of range"),
        (["--tensor-parallel-size="], "not an integer"),
        (["-tp", "_3"], "not an integer"),
        (["-tp", "3_"], "not an integer"),
        (["-tp", "1__0"], "not an integer"),
        (["-tp", "--3"], "read as a flag"),
        (["-tp", "+-3"], "not an integer"),
    ],
)
def test_row17_unreadable_degree(m, argv, fragment) -> None:
    degrees = m.parse_degrees(VLLM, argv)
    assert error_flags(degrees) == ["--tensor-parallel-size"]
    assert fragment in degrees.errors[0][1]
    assert "-tp" in degrees.errors[0][1] or "--tensor-parallel-size" in degrees.errors[0][1]


@BOTH
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1_0", 10),
        (" 3 ", 3),
        ("\t4\n", 4),
        ("+2", 2),
        ("٣", 3),
        ("0_2", 2),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_integers_read_as_python_int(m, value, expected) -> None:
    degrees = m.parse_degrees(VLLM, ["--tensor-parallel-size", value])
    assert degrees.ok and degrees.tp == expected


@BOTH
def test_row17_accepted_forms(m) -> None:
    for argv in (["-tp", "2"], ["-tp=2"], ["--tensor-parallel-size", "2"], ["--tensor_parallel_size=2"]):
        assert m.parse_degrees(VLLM, argv).tp == 2, argv
    assert m.parse_degrees(VLLM, ["--tensor", "2"]).tp == 2  # unique prefix
    assert m.parse_degrees(VLLM, ["-t", "2"]).tp == 2  # bare single-dash abbreviation


@BOTH
def test_last_wins_and_sticky_parse_errors(m) -> None:
    assert m.parse_degrees(VLLM, ["-tp", "2", "--tensor-parallel-size=4"]).tp == 4
    # A bound is the engine's post-parse check: only the effective (last) value counts.
    later = m.parse_degrees(VLLM, ["-tp", "0", "-tp", "2"])
    assert later.ok and later.tp == 2
    earlier = m.parse_degrees(VLLM, ["-tp", "2", "-tp", "0"])
    assert error_flags(earlier) == ["--tensor-parallel-size"]
    # A value the parser cannot convert stops the engine wherever it is.
    assert error_flags(m.parse_degrees(VLLM, ["-tp", "x", "-tp", "2"])) == ["--tensor-parallel-size"]
    assert error_flags(m.parse_degrees(VLLM, ["-tp", "-tp", "2"])) == ["--tensor-parallel-size"]


@BOTH
def test_single_dash_forms(m) -> None:
    d = m.parse_degrees(VLLM, ["-tp2", "-t=4", "-pc", "3", "-e", "-dc", "5", "-d", "7", "-n2", "-r0"])
    assert d.ok
    assert d.tp == 1  # -tp2 and -t=2 pass through
    assert d.pcp == 3 and d.dcp == 1  # -dc is vLLM's own option, not -dcp
    assert d.modes == ("--enable-expert-parallel",)
    assert d.wiring == ("--nnodes", "--node-rank")
    assert m.parse_degrees(VLLM, ["-d", "7"]).declared == ()  # -d is ambiguous


@BOTH
def test_ambiguous_prefixes_pass_silently(m) -> None:
    d = m.parse_degrees(VLLM, ["--data-parallel", "3", "--data-parallel-size-l", "2"])
    assert d.ok and d.dp == 1 and d.dpl == 2
    assert m.parse_degrees(VLLM, ["-tp", "--data-parallel"]).errors  # but it is flag-looking
    d = m.parse_degrees(SGLANG, ["--d", "2", "--dp", "4", "--e", "--ep", "8"])
    assert d.ok and d.dp == 4 and d.ep == 8


@BOTH
def test_modes_consume_no_token_and_double_dash_ends(m) -> None:
    d = m.parse_degrees(VLLM, ["-ep", "-tp", "2", "--", "-pp", "4"])
    assert d.ok and d.tp == 2 and d.pp == 1 and d.modes == ("--enable-expert-parallel",)
    d = m.parse_degrees(SGLANG, ["--enable-dp-attention", "4", "--dp-size", "4"])
    assert d.ok and d.dp == 4 and d.modes == ("--enable-dp-attention",)


@BOTH
def test_unknown_flags_positionals_and_empties_never_error(m) -> None:
    d = m.parse_degrees(VLLM, ["vllm", "serve", "", "-", "--foo", "-x", "--bar=1", "model", "-1"])
    assert d.ok and d.declared == ()


@BOTH
def test_vllm_dotted_degree_is_not_an_integer(m) -> None:
    d = m.parse_degrees(VLLM, ["--tensor-parallel-size.x=3"])
    assert error_flags(d) == ["--tensor-parallel-size"]
    assert "dotted" in d.errors[0][1]
    # SGLang does no such rewrite: the dotted token is just an unknown flag.
    assert m.parse_degrees(SGLANG, ["--tp-size.x=3"]).ok


@BOTH
def test_sglang_table(m) -> None:
    d = m.parse_degrees(
        SGLANG,
        [
            "--tensor-parallel-size",
            "4",
            "--pp-size=2",
            "--data-parallel-size",
            "2",
            "--ep",
            "8",
            "--dcp-size",
            "2",
            "--attention-context-parallel-size",
            "2",
            "--moe-data-parallel-size",
            "2",
            "--dwdp-size",
            "2",
            "--enable-prefill-cp",
            "--nccl-init-addr",
            "10.0.0.1:5000",
            "--node-rank",
            "1",
        ],
    )
    assert d.ok
    assert (d.tp, d.pp, d.dp, d.ep, d.dcp, d.attn_cp, d.moe_dp, d.dwdp) == (4, 2, 2, 8, 2, 2, 2, 2)
    assert d.modes == ("--enable-prefill-cp",)
    assert d.wiring == ("--node-rank", "--dist-init-addr")
    # No underscores on SGLang.
    assert m.parse_degrees(SGLANG, ["--tp_size", "4"]).tp == 1


@BOTH
def test_unknown_engine_parses_to_all_ones(m) -> None:
    d = m.parse_degrees("TensorRT-LLM", ["-tp", "x"])
    assert d.ok and d.tp == 1 and d.dp == 1
    assert m.width("TensorRT-LLM", d) == (1, ())


@BOTH
def test_vllm_dp_size_env_fallback(m) -> None:
    """§12.5: VLLM_DP_SIZE is a fallback beneath CLI DP and errors only when effective."""
    d = m.parse_degrees(VLLM, [], env={"VLLM_DP_SIZE": "4"})
    assert d.ok and d.dp == 4 and d.dp_from_env
    d = m.parse_degrees(VLLM, ["-dp", "2"], env=[{"name": "VLLM_DP_SIZE", "value": "x"}])
    assert d.ok and d.dp == 2 and not d.dp_from_env
    d = m.parse_degrees(VLLM, ["-dp", "two"], env={"VLLM_DP_SIZE": "4"})
    assert error_flags(d) == ["--data-parallel-size"]  # present, though unreadable: env stays beneath
    d = m.parse_degrees(VLLM, [], env=[{"name": "VLLM_DP_SIZE", "value": "x"}])
    assert error_flags(d) == ["VLLM_DP_SIZE"]
    assert error_flags(m.parse_degrees(VLLM, [], env={"VLLM_DP_SIZE": "0"})) == ["VLLM_DP_SIZE"]
    assert m.parse_degrees(VLLM, ["--", "-dp", "2"], env={"VLLM_DP_SIZE": "3"}).dp == 3
    # --data-parallel-size-local is not the DP flag.
    assert m.parse_degrees(VLLM, ["-dpl", "2"], env={"VLLM_DP_SIZE": "3"}).dp == 3
    # SGLang reads no degree env.
    assert m.parse_degrees(SGLANG, [], env={"VLLM_DP_SIZE": "x"}).ok


# --- Width (§4.5, §5 #18, §12.6) ------------------------------------------------------------------


@BOTH
def test_row18_width(m) -> None:
    r, factors = m.width(VLLM, m.parse_degrees(VLLM, ["-tp", "2"]))
    assert r == 2 and factors == (("--tensor-parallel-size", 2),)
    assert r <= 2  # TP2 on 2 cards fits
    assert r > 1  # TP2 on 1 card does not, whatever the size


@BOTH
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-tp", "2", "-pp", "2", "-pcp", "2", "-dp", "2"], 16),
        (["-tp", "2", "-dp", "4", "-dpl", "2"], 4),  # DPL>1 replaces DP
        (["-tp", "2", "-dp", "4", "-dpl", "1"], 2),  # DPL==1: neither
        (["-tp", "2", "-dp", "4", "-dpl", "0"], 8),  # declared 0 = unset
        (["-tp", "2", "-dcp", "4"], 2),  # DCP reuses TP ranks
    ],
)
def test_vllm_width(m, argv, expected) -> None:
    assert m.width(VLLM, m.parse_degrees(VLLM, argv))[0] == expected


@BOTH
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--tp", "2", "--pp", "2", "--dp", "4"], 16),
        (["--tp", "2", "--dp", "4", "--enable-dp-attention"], 2),
        (["--tp", "2", "--dp", "4", "--dwdp-size", "2"], 2),
        (["--tp", "2", "--dp", "4", "--moe-dp-size", "2"], 2),
        (["--tp", "2", "--dp", "4", "--attn-cp-size", "2"], 2),
        (["--tp", "2", "--dp", "4", "--ep-size", "8"], 8),
    ],
)
def test_sglang_width(m, argv, expected) -> None:
    assert m.width(SGLANG, m.parse_degrees(SGLANG, argv))[0] == expected


@BOTH
def test_width_overflow_is_flagged(m) -> None:
    d = m.parse_degrees(VLLM, ["-tp", str(2**40), "-pp", str(2**40)])
    assert d.ok
    r, factors = m.width(VLLM, d)
    assert r is None and len(factors) == 2


@BOTH
def test_wiring_flags_are_reported(m) -> None:
    d = m.parse_degrees(VLLM, ["-tp", "8", "--nnodes", "2", "--data_parallel_address=10.0.0.1", "-dph"])
    assert d.wiring == ("--data-parallel-address", "--data-parallel-hybrid-lb", "--nnodes")


# --- --port (§4.6, §5 #21) and stream (§4.1) -----------------------------------------------------------


@BOTH
def test_row21_port(m) -> None:
    assert m.read_port(VLLM, ["--port", "8001"]) == 8001
    assert m.read_port(VLLM, ["--port", "5558"]) == 5558
    assert m.read_port(VLLM, ["--port", "9000", "--port=9001"]) == 9001
    assert m.read_port(VLLM, ["--po", "9000"]) == 9000
    assert m.read_port(SGLANG, ["--port=30000"]) == 30000
    assert m.read_port(VLLM, ["--host", "0.0.0.0"]) is None
    for argv in (["--port", "0"], ["--port", "65536"], ["--port", "x"], ["--port"], ["--port", "-1"]):
        assert m.read_port(VLLM, argv) is None, argv
    assert m.read_port(VLLM, ["--port", "9000", "--", "--port", "9001"]) == 9000


@BOTH
def test_stream(m) -> None:
    assert m.stream({"command": ["vllm", "serve"], "extraArgs": ["-tp", "2"]}) == ["vllm", "serve"]
    assert m.stream({"command": [], "extraArgs": ["-tp", "2"]}) == ["-tp", "2"]
    assert m.stream({"extraArgs": ["-tp", "2"]}) == ["-tp", "2"]
    assert m.stream({}) == []

    class Role:
        command = None
        extra_args = ("--x",)

    assert m.stream(Role()) == ["--x"]


@BOTH
def test_row17_degrees_parsed_from_take_over_command(m) -> None:
    """§12.4: a take-over command is parsed; extraArgs beside it are inert."""
    role = {"command": ["vllm", "serve", "m", "-tp", "two"], "extraArgs": ["-tp", "2"]}
    assert error_flags(m.parse_degrees(VLLM, m.stream(role))) == ["--tensor-parallel-size"]


def test_degrees_object() -> None:
    d = compiled_argv.Degrees(VLLM, tp=2)
    assert d.tp == 2 and d.dpl == 0 and d.ok and d.get("tp") == 2
    assert compiled_argv.parse_degrees(VLLM, ["-tp", "2"]) == compiled_argv.Degrees(
        VLLM, tp=2, declared=("--tensor-parallel-size",)
    )
    assert compiled_argv.parse_degrees(VLLM, ["-tp", "2"]) != d
    assert "tp=2" in repr(d)
    with pytest.raises(AttributeError):
        d.tp = 3  # read-only from Python when compiled
