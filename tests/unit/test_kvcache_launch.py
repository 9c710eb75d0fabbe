"""The launch-shape analysis of Pod injection (kv-cache spec §3.5), rule by rule."""

from __future__ import annotations

import pytest

from webhooks.kvcache.launch import Launch, Refused, analyse


def ok(command, args=None, *, engine="vLLM", forwarding=False) -> Launch:
    return analyse(engine, command, args, forwarding=forwarding)


def refused(command, args=None, *, engine="vLLM", forwarding=False) -> Refused:
    with pytest.raises(Refused) as caught:
        analyse(engine, command, args, forwarding=forwarding)
    return caught.value


def test_rule1_neither_command_nor_args_is_never_exempt() -> None:
    assert ok(["vllm"]) == Launch("vllm", False)
    for forwarding in (False, True):
        assert "CMD" in refused([], [], forwarding=forwarding).message


def test_rule2_args_only_needs_forwarding() -> None:
    assert ok(None, ["serve"], forwarding=True) == Launch("", True)
    assert refused(None, ["serve"]).field == "args"


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["env", "FOO=1", "vllm", "serve"], "vllm"),
        (["env", "-i", "-u", "HOME", "--chdir=/x", "-uPATH", "vllm"], "vllm"),
        (["env", "--", "vllm"], "vllm"),
        (["tini", "-s", "-p", "SIGTERM", "--", "vllm"], "vllm"),
        (["/sbin/tini", "-e", "143", "vllm"], "vllm"),
        (["dumb-init", "--rewrite", "15:2", "vllm"], "vllm"),
        (["busybox", "env", "vllm"], "vllm"),
        (["timeout", "--signal", "KILL", "-k", "5", "30m", "/usr/bin/vllm"], "vllm"),
        (["env", "tini", "--", "timeout", "10", "vllm"], "vllm"),
    ],
)
def test_rule3_transparent_launchers_are_stripped(command, program) -> None:
    assert ok(command, ["serve", "m"]) == Launch(program, False)


@pytest.mark.parametrize(
    "command",
    [
        ["env", "-S", "sh -c 'vllm serve'"],
        ["env", "-iS", "vllm"],
        ["env", "--split-string=vllm"],
        ["env", "--split", "vllm"],
    ],
)
def test_rule3_split_string_hides_the_command(command) -> None:
    assert "hides" in refused(command, []).message
    assert ok(command, [], forwarding=True) == Launch("", True)


@pytest.mark.parametrize(
    "command", [["tini", "--"], ["timeout", "30"], ["env", "A=1"], ["busybox"], ["dumb-init", "-r", "1:2"]]
)
def test_rule4_launcher_with_nothing_after_it(command) -> None:
    assert "nothing after it" in refused(command, []).message
    assert "nothing after it" in refused(command, [], forwarding=True).message


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (["timeout", "30", "sh", "-c", "vllm serve"], []),
        (["sh"], ["-c", "vllm serve"]),
        (["bash", "-ec", "vllm"], []),
        (["bash", "-co", "pipefail", "vllm"], []),
        (["/bin/zsh", "-x", "-c", "x"], []),
    ],
)
def test_rule5_command_mode_is_never_exempt(command, args) -> None:
    for forwarding in (False, True):
        assert "not exemptable" in refused(command, args, forwarding=forwarding).message


def test_rule5_only_before_the_first_operand() -> None:
    error = refused(["sh", "/app/run.sh", "-c", "cfg"])
    assert "script" in error.message  # rule 6, not command mode
    assert ok(["bash", "/app/run"], forwarding=True) == Launch("bash", True)
    assert ok(["bash", "-euo", "pipefail", "/app/run.sh"], forwarding=True) == Launch("bash", True)
    assert ok(["bash", "--rcfile", "/x", "--", "/app/start"], forwarding=True).forwarded


@pytest.mark.parametrize("command", [["./run.sh"], ["/entrypoint"], ["run"], ["sh", "/app/run.sh"]])
def test_rule6_scripts_need_forwarding(command) -> None:
    assert "script" in refused(command).message
    assert ok(command, forwarding=True).forwarded


def test_rule7_entry_point_must_match_the_engine() -> None:
    assert ok(["python3", "-m", "sglang.launch_server"], engine="SGLang") == Launch("python3", False)
    assert ok(["python", "-u", "-m", "sglang.launch_server"], engine="SGLang").program == "python"
    assert not ok(["python3", "-msglang.launch_server"], engine="SGLang").forwarded
    assert "entry point" in refused(["vllm"], engine="SGLang").message
    assert "entry point" in refused(["python3", "-m", "vllm.entrypoints.openai.api_server"]).message
    assert ok(["my-launcher"], forwarding=True) == Launch("my-launcher", True)


@pytest.mark.parametrize(
    ("command", "engine", "forwarding", "program"),
    [
        (["/usr/local/bin/vllm", "serve"], "vLLM", False, "vllm"),
        (["/opt/venv/bin/python3", "-m", "sglang.launch_server"], "SGLang", False, "python3"),
        (["/sbin/tini", "--", "/usr/bin/env", "/opt/bin/vllm"], "vLLM", False, "vllm"),
        (["./run.sh"], "vLLM", True, "run.sh"),
        (["/bin/bash", "/app/run"], "vLLM", True, "bash"),
        (["/opt/my-launcher"], "vLLM", True, "my-launcher"),
    ],
)
def test_the_record_names_the_programs_base_name(command, engine, forwarding, program) -> None:
    # The record's launchProgram is the executable's base name, wherever the image keeps it.
    assert ok(command, engine=engine, forwarding=forwarding).program == program


def test_command_and_args_are_one_argv() -> None:
    assert refused(["sh", "-c"], ["x"]).message == refused(["sh"], ["-c", "x"]).message
