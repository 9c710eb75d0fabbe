"""``admit`` on files it cannot use: every one exits 2 with one line naming the file and the
problem — binary and UTF-16 files, wrong-typed documents, deep nesting, alias bombs — and a run
whose output cannot be written whole is an error exit, never a truncated success."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webhooks import chain, documents
from webhooks.lookups import FileLookups

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a}\nspec: {containers: [{name: a, image: x}]}\n"


def _admit(*args: str, stdin: bytes | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_operator", "admit", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        **kw,
    )


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, result
    assert result.stdout == b""
    err = result.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("gpustack-operator admit: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


BILLION_LAUGHS = "\n".join(
    [
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata: {name: lol}",
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)


@pytest.mark.parametrize(
    ("name", "content", "needles"),
    [
        ("binary.yaml", bytes(range(256)) * 4, ["binary.yaml", "NUL bytes"]),
        ("utf16.yaml", POD.encode("utf-16"), ["utf16.yaml", "UTF-16"]),
        ("latin1.yaml", "metadata: {name: café}".encode("latin-1"), ["latin1.yaml", "not UTF-8"]),
        ("kind.yaml", b"apiVersion: v1\nkind: [Pod]\nmetadata: {name: p}\n", ["document 0: kind", "string"]),
        ("meta.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: x\n", ["document 0: metadata"]),
        ("name.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: 5}\n", ["metadata.name"]),
        ("deep.yaml", b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", ["deep.yaml", "nested too deeply"]),
        ("bomb.yaml", BILLION_LAUGHS.encode(), ["bomb.yaml", "aliases expand it by more than 10000"]),
        ("self.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: &m {name: p, x: *m}\n", ["refers to itself"]),
        ("bad.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: p\n", ["YAML does not parse"]),
        ("list.yaml", b"apiVersion: v1\nkind: List\nitems: [{kind: Pod}]\n", ["items[0]: apiVersion"]),
    ],
)
def test_unusable_files_exit_2_with_one_line(
    tmp_path: Path, name: str, content: bytes, needles: list[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    _one_line_error(_admit("-f", str(path)), *needles)
    # The same file among the cluster objects, or as the old objects of an UPDATE.
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / name).write_bytes(content)
    (tmp_path / "pod.yaml").write_text(POD)
    _one_line_error(
        _admit("--objects", str(tmp_path / "objects"), "-f", str(tmp_path / "pod.yaml")),
        "--objects",
        *needles,
    )
    _one_line_error(
        _admit("--operation", "UPDATE", "--old", str(path), "-f", str(tmp_path / "pod.yaml")), *needles
    )


def test_stdin_is_read_as_bytes_too() -> None:
    _one_line_error(_admit("-f", "-", stdin=POD.encode("utf-16")), "<stdin>", "UTF-16")


def test_a_failed_write_to_stdout_is_an_error_exit(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    with open(os.devnull, "rb") as devnull_in, open("/dev/full", "wb") as full:
        result = subprocess.run(
            [sys.executable, "-m", "gpustack_operator", "admit", "-f", str(tmp_path / "pod.yaml")],
            stdin=devnull_in,
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert result.returncode == 2
    assert b"cannot write to standard output" in result.stderr


def test_output_past_the_ceiling_is_an_error(monkeypatch) -> None:
    from gpustack_operator import admit

    monkeypatch.setattr(admit._Output, "LIMIT", 10)
    with open(os.devnull, "wb") as sink, pytest.raises(admit.OutputError, match="exceed 10 bytes"):
        admit._Output(sink).write(b"x" * 11)


def test_the_reader_folds_yaml_positions_into_one_line() -> None:
    with pytest.raises(documents.DocumentError) as error:
        documents.objects("a: [1,\nb: }", "f.yaml")
    assert "\n" not in str(error.value) and "line" in str(error.value)


def test_update_reaches_a_webhook_whose_selector_only_the_old_object_matches(monkeypatch) -> None:
    from webhooks import registry
    from webhooks.decision import allow

    calls: list[str] = []

    async def guard(request, lookups):
        calls.append(request.operation)
        return allow()

    selector = {"matchExpressions": [{"key": "guarded", "operator": "Exists"}]}
    hook = registry.Webhook(False, "", "v1", "configmaps", "ConfigMap", guard, object_selector=selector)
    monkeypatch.setattr(registry, "WEBHOOKS", (hook,))
    old = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"guarded": "1"}}}
    new = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {}}}
    assert asyncio.run(chain.run(new, FileLookups(), operation="UPDATE", old=old)).allowed
    assert calls == ["UPDATE"]  # the label was dropped, yet the guarding webhook was called
    assert asyncio.run(chain.run(new, FileLookups(), operation="UPDATE", old=new)).allowed
    assert calls == ["UPDATE"]  # neither object opts in: not called
