"""api.manifest: the canonical manifest text and digest (§4.2) and the pattern semantics (§4.1 step 2)."""

from __future__ import annotations

import hashlib

import pytest

from api.manifest import Manifest, ManifestError, ManifestFile, path_problem, pattern_problem, selected

SHA = "a" * 64
BLOB = "b" * 40


def test_text_is_header_then_lines_sorted_by_path_bytes_each_lf_terminated() -> None:
    files = [
        ManifestFile("tokenizer/vocab.txt", 6, "gitsha1", BLOB),
        ManifestFile("Zeta.json", 2, "gitsha1", "c" * 40),
        ManifestFile("model-00001.safetensors", 1024, "sha256", SHA),
        ManifestFile("é.txt", 1, "gitsha1", "d" * 40),  # 0xC3 sorts after every ASCII byte
    ]
    manifest = Manifest.of(files)
    expected = (
        "gpustack-manifest v1\n"
        f"gitsha1:{'c' * 40} 2 Zeta.json\n"
        f"sha256:{SHA} 1024 model-00001.safetensors\n"
        f"gitsha1:{BLOB} 6 tokenizer/vocab.txt\n"
        f"gitsha1:{'d' * 40} 1 é.txt\n"
    ).encode()
    assert manifest.text == expected
    assert manifest.digest == "sha256:" + hashlib.sha256(expected).hexdigest()
    assert manifest.size == 1033


def test_digest_does_not_depend_on_listing_order() -> None:
    a = ManifestFile("a", 1, "gitsha1", BLOB)
    b = ManifestFile("b", 2, "sha256", SHA)
    assert Manifest.of([a, b]).digest == Manifest.of([b, a]).digest


def test_a_known_digest() -> None:
    # Computed independently: printf 'gpustack-manifest v1\ngitsha1:<40 b> 6 config.json\n' | sha256sum
    manifest = Manifest.of([ManifestFile("config.json", 6, "gitsha1", BLOB)])
    assert (
        manifest.digest
        == "sha256:"
        + hashlib.sha256(b"gpustack-manifest v1\ngitsha1:" + b"b" * 40 + b" 6 config.json\n").hexdigest()
    )


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../x", "a/../b", "a//b", "a/./b", "a/", "", "new\nline", "tab\there", "bad\udcff"],
)
def test_bad_paths_refuse_the_whole_manifest(path: str) -> None:
    assert path_problem(path) is not None
    with pytest.raises(ManifestError):
        Manifest.of([ManifestFile("ok.json", 1, "gitsha1", BLOB), ManifestFile(path, 1, "gitsha1", BLOB)])


def test_good_paths() -> None:
    for path in ("config.json", "a b/c d.txt", "sub/dir/w.safetensors", "..hidden", "x..y"):
        assert path_problem(path) is None


@pytest.mark.parametrize(
    "entry",
    [
        ManifestFile("a", 1, "sha256", "A" * 64),
        ManifestFile("a", 1, "sha256", "*" * 64),
        ManifestFile("a", 1, "gitsha1", SHA),
        ManifestFile("a", -1, "gitsha1", BLOB),
    ],
)
def test_bad_hashes_and_sizes_are_refused(entry: ManifestFile) -> None:
    with pytest.raises(ManifestError):
        Manifest.of([entry])


def test_duplicate_paths_are_refused() -> None:
    with pytest.raises(ManifestError, match="twice"):
        Manifest.of([ManifestFile("a", 1, "gitsha1", BLOB), ManifestFile("a", 1, "gitsha1", BLOB)])


def test_parse_round_trips_and_refuses_non_canonical_text() -> None:
    manifest = Manifest.of([ManifestFile("b", 2, "sha256", SHA), ManifestFile("a", 1, "gitsha1", BLOB)])
    assert Manifest.parse(manifest.text) == manifest
    lines = manifest.text.decode().split("\n")
    swapped = "\n".join([lines[0], lines[2], lines[1], ""]).encode()
    with pytest.raises(ManifestError, match="canonical"):
        Manifest.parse(swapped)
    with pytest.raises(ManifestError):
        Manifest.parse(manifest.text.rstrip(b"\n"))


# --- patterns ---------------------------------------------------------------------------------------

FILES = [
    "config.json",
    "model-00001.safetensors",
    "sub/model.safetensors",
    "sub/deep/notes.md",
    "original/consolidated.pth",
    "README.md",
]


def pick(allow: list[str] | None, ignore: list[str] | None) -> list[str]:
    return [p for p in FILES if selected(p, allow, ignore)]


def test_empty_allow_list_keeps_every_file() -> None:
    assert pick(None, None) == FILES
    assert pick([], []) == FILES


def test_star_crosses_slashes() -> None:
    assert pick(["*.safetensors"], None) == ["model-00001.safetensors", "sub/model.safetensors"]
    assert pick(["sub*"], None) == ["sub/model.safetensors", "sub/deep/notes.md"]


def test_question_mark_crosses_a_slash_too() -> None:
    assert pick(["sub?model.safetensors"], None) == ["sub/model.safetensors"]


def test_matching_is_case_sensitive() -> None:
    assert pick(["readme.md"], None) == []
    assert pick(["README.md"], None) == ["README.md"]


def test_trailing_slash_selects_everything_under_the_directory() -> None:
    assert pick(["sub/"], None) == ["sub/model.safetensors", "sub/deep/notes.md"]
    assert pick(None, ["original/"]) == [p for p in FILES if not p.startswith("original/")]


def test_ignore_beats_allow() -> None:
    assert pick(["*.safetensors", "*.json"], ["sub/*"]) == ["config.json", "model-00001.safetensors"]
    assert pick(["config.json"], ["config.json"]) == []


def test_pattern_checks() -> None:
    assert pattern_problem("*.safetensors") is None
    assert pattern_problem("") is not None
    assert pattern_problem("x" * 257) is not None
    assert pattern_problem("a\nb") is not None
    assert pattern_problem(7) is not None
