"""api.images: the sshd image under the container-namespace and container-registry Settings."""

from __future__ import annotations

import pytest

from api import images

DEFAULT = "gpustack/ssh-server:v1.3.0"


@pytest.mark.parametrize(
    ("reference", "registry", "namespace", "expected"),
    [
        (DEFAULT, "", "", DEFAULT),
        (DEFAULT, "", "mirror", "mirror/ssh-server:v1.3.0"),
        (DEFAULT, "registry.local:5000", "", "registry.local:5000/gpustack/ssh-server:v1.3.0"),
        (DEFAULT, "registry.local:5000/", "mirror", "registry.local:5000/mirror/ssh-server:v1.3.0"),
        ("quay.io/gpustack/ssh-server:v1", "registry.local", "", "registry.local/gpustack/ssh-server:v1"),
        ("quay.io/gpustack/ssh-server:v1", "", "team", "quay.io/team/ssh-server:v1"),
        ("localhost/a/b/c@sha256:abc", "", "x", "localhost/x/b/c@sha256:abc"),
        ("busybox", "", "mirror", "mirror/busybox"),
        ("localhost:5000/busybox:1", "r.io", "ns", "r.io/ns/busybox:1"),
        ("gpustack/ssh-server:v1@sha256:ff", "r.io", "", "r.io/gpustack/ssh-server:v1@sha256:ff"),
    ],
)
def test_rewrite(reference: str, registry: str, namespace: str, expected: str) -> None:
    assert images.rewrite(reference, registry=registry, namespace=namespace) == expected


def test_split_keeps_tag_and_digest_verbatim() -> None:
    assert images.split("r.io:5000/a/b:t@sha256:00") == ("r.io:5000", "a/b", ":t@sha256:00")
    assert images.split("a/b") == ("", "a/b", "")
