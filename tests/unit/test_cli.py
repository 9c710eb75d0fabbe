"""The command line: every subcommand explains itself, and unusable input exits 2 with a message
naming the file, the document and the field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpustack_operator import cli

SUBCOMMANDS = [
    "worker",
    "worker-gateway",
    "device-manager",
    "model-manager",
    "admit",
    "certs",
    "crds",
    "version",
]


def gpustack(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_operator", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "usage: gpustack-operator " + command in text
    assert len(text.splitlines()) > 3


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for command in SUBCOMMANDS:
        assert command in text


def test_no_subcommand_is_a_usage_error():
    assert cli.main([]) == cli.EXIT_USAGE


def test_device_manager_without_a_command_prints_its_usage(capsys):
    assert cli.main(["device-manager"]) == cli.EXIT_USAGE
    assert "serve" in capsys.readouterr().err


def test_device_manager_detect_prints_the_spec_of_a_simulated_node(tmp_path, capsys):
    profile = tmp_path / "node.yaml"
    profile.write_text("manufacturer: nvidia\ncards: [{product: NVIDIA A10G, count: 2}]\n")
    assert cli.main(["dm", "detect", "--manufacturer", "nvidia", "--simulate", str(profile)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [len(g["accelerators"]) for g in out["spec"]["groups"]] == [2]
    assert out["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.count"] == "2"


def test_device_manager_detect_names_the_field_of_a_malformed_profile(tmp_path, capsys):
    profile = tmp_path / "node.yaml"
    profile.write_text("manufacturer: nvidia\ncards: [{product: NVIDIA A10G, count: -1}]\n")
    assert cli.main(["dm", "detect", "--manufacturer", "nvidia", "--simulate", str(profile)]) == 1
    assert "cards[0].count: want an integer >= 1" in capsys.readouterr().err


def test_model_manager_needs_its_node_name(monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit, match="--node-name"):
        cli.main(["model-manager", "--insecure"])


def test_version():
    result = gpustack("version")
    assert result.returncode == 0 and result.stdout.startswith("gpustack-operator ")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: [1, 2\n", "document 0: YAML does not parse"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n- just\n- a list\n",
            "document 1: must be a mapping",
        ),
        ("kind: Pod\nmetadata: {name: a}\n", "document 0: apiVersion: Required value"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {}\n", "document 0: metadata.name: Required value"),
    ],
)
def test_admit_unusable_input_exits_2_naming_file_and_document(tmp_path, text, fragment):
    path = tmp_path / "in.yaml"
    path.write_text(text)
    result = gpustack("admit", "-f", str(path))
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr and fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_admit_missing_file_exits_2():
    result = gpustack("admit", "-f", "/no/such/file.yaml")
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_admit_update_needs_old():
    result = gpustack(
        "admit", "-f", "-", "--operation", "UPDATE", stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"
    )
    assert result.returncode == 2 and "--old" in result.stderr


def test_model_manager_takes_the_flags_of_the_spec():
    # Operations spec D.1: --node-name, --kubelet-dir, --cache-root, --csi-socket, --secure-port.
    from nodeplugins.modelmanager.main import csi_socket_path

    args = cli.parser().parse_args(
        [
            "model-manager",
            "--node-name=n1",
            "--kubelet-dir=/k",
            "--cache-root=/cache",
            "--csi-socket=/run/csi/model.sock",
            "--secure-port=4444",
        ]
    )
    assert (args.node_name, args.kubelet_dir, args.root_path) == ("n1", "/k", "/cache")
    assert str(csi_socket_path(args)) == "/run/csi/model.sock" and args.secure_port == 4444
    defaults = cli.parser().parse_args(["mm", "--root-path=/old"])  # the earlier spelling still works
    assert defaults.root_path == "/old" and csi_socket_path(defaults) is None


def test_model_manager_serves_csi_on_the_socket_it_is_given(tmp_path):
    from nodeplugins.modelmanager.grpc_server import Servers, csi_socket

    default = Servers(None, "n1", tmp_path, lambda: True)
    assert default.csi_path == csi_socket(tmp_path)
    given = Servers(None, "n1", tmp_path, lambda: True, csi_path=tmp_path / "elsewhere.sock")
    assert given.csi_path == tmp_path / "elsewhere.sock"
    # The kubelet learns the endpoint from the registration, so it follows the socket.
    assert given.registration.endpoint == tmp_path / "elsewhere.sock"
