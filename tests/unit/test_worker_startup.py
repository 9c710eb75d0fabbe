"""The worker's refusals before it touches the cluster (operations spec D.1, D.8): an invalid
``GPUSTACK_*`` seed or deploy-time variable stops it with one line naming the variable and the rule,
unknown applications or manufacturers are refused at parse, and image mode says it is not built."""

from __future__ import annotations

import pytest

from gpustack_operator import cli, worker, worker_flags


def _run(capsys, monkeypatch, argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_an_invalid_seed_stops_the_worker_with_one_line(capsys, monkeypatch) -> None:
    code, err = _run(
        capsys,
        monkeypatch,
        ["worker", "--kubeconfig", "/nonexistent"],
        {"GPUSTACK_MODEL_ARTIFACT_HTTPS_PROXY": "http://user:secret@proxy:3128"},
    )
    lines = [line for line in err.splitlines() if line.startswith("gpustack-operator worker:")]
    assert code == 2 and len(lines) == 1
    assert "model-artifact-https-proxy" in lines[0] and "GPUSTACK_MODEL_ARTIFACT_HTTPS_PROXY" in lines[0]
    assert "must not carry credentials" in lines[0]


def test_crossed_watermark_seeds_are_refused(monkeypatch) -> None:
    env = {"GPUSTACK_MODEL_STORE_HIGH_WATERMARK": "60", "GPUSTACK_MODEL_STORE_LOW_WATERMARK": "70"}
    with pytest.raises(worker.StartupError) as refused:
        worker.check_environment(env)
    assert "model-store-high-watermark" in str(refused.value) and "above" in str(refused.value)


def test_a_deploy_time_boolean_is_read_with_the_one_parser() -> None:
    with pytest.raises(worker.StartupError) as refused:
        worker.check_environment({"GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS": "yes"})
    assert "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS='yes'" in str(refused.value)
    seeds = worker.check_environment({"GPUSTACK_WORKLOAD_FIT_AFFINITY": "False"})
    assert seeds["workload-fit-affinity"] == "False" and len(seeds) > 30


@pytest.mark.parametrize("value", ["0", "ten", "3601", "1.5"])
def test_the_retry_back_off_must_be_whole_seconds_from_1_to_3600(value: str) -> None:
    with pytest.raises(worker.StartupError) as refused:
        worker.check_environment({"GPUSTACK_NODE_DEVICES_RETRY_SECONDS": value})
    assert f"GPUSTACK_NODE_DEVICES_RETRY_SECONDS={value!r}" in str(refused.value)
    assert "from 1 to 3600" in str(refused.value) and "default (30)" in str(refused.value)


def test_the_retry_back_off_is_30_seconds_unless_set() -> None:
    from api import booleans

    assert booleans.node_devices_retry_seconds({}) == 30
    assert booleans.node_devices_retry_seconds({"GPUSTACK_NODE_DEVICES_RETRY_SECONDS": " 5 "}) == 5
    worker.check_environment({"GPUSTACK_NODE_DEVICES_RETRY_SECONDS": "5"})


def test_image_mode_is_refused_as_not_built(capsys, monkeypatch) -> None:
    code, err = _run(capsys, monkeypatch, ["worker", "--disable-applications=kueue"])
    assert code == 3 and "image mode" in err and "--disable-applications=*" in err


def test_unknown_applications_and_manufacturers_fail_at_parse(capsys, monkeypatch) -> None:
    for argv, named in (
        (["worker", "--disable-applications=*,dns"], "unknown application(s) dns"),
        (["worker", "--manufacturer=nvidia,acme"], "unknown manufacturer(s) acme"),
        (["worker", "--kube-leader-lease=soon"], "not a duration"),
    ):
        with pytest.raises(SystemExit) as stopped:
            cli.main(argv)
        assert stopped.value.code == 2 and named in capsys.readouterr().err


def test_flags_of_d1() -> None:
    args = cli.parser().parse_args(
        ["w", "--kube-leader-election=false", "--kube-leader-lease=20s", "--informer-cache-resync-period=30m"]
    )
    worker_flags.finish_arguments(args, cli.parser())
    assert args.kube_leader_election is False and args.kube_leader_lease == 20.0
    assert args.informer_cache_resync_period == 1800.0 and args.disable_applications == ["*"]
    assert args.vendor_ids[0] == "10de" and len(args.manufacturer) == 9


def test_the_certificate_names_of_a_webhook_url() -> None:
    assert worker._url_names("https://127.0.0.1:9443") == ([], ["127.0.0.1"])
    assert worker._url_names("https://worker.example.com") == (["worker.example.com"], [])
