"""The worker learns its own identity at startup, or refuses to start (§3.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.identity import IdentityUnknown, learn
from kube.client import ApiError


class Apiserver:
    """Answers SelfSubjectReview and TokenReview creations as a given apiserver version would."""

    def __init__(self, *, self_review: bool, token_user: str | None = None) -> None:
        self.self_review = self_review
        self.token_user = token_user
        self.reviewed: list[str] = []

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "SelfSubjectReview":
            if not self.self_review:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return {
                **obj,
                "status": {"userInfo": {"username": "system:serviceaccount:gpustack-system:worker"}},
            }
        self.reviewed.append(obj["spec"]["token"])
        if self.token_user is None:
            return {**obj, "status": {"authenticated": False}}
        return {**obj, "status": {"authenticated": True, "user": {"username": self.token_user}}}


def test_self_subject_review(tmp_path: Path) -> None:
    assert (
        learn(Apiserver(self_review=True), tmp_path / "none")
        == "system:serviceaccount:gpustack-system:worker"
    )


def test_token_review_before_1_28(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("eyJ.worker.token\n")
    server = Apiserver(self_review=False, token_user="system:serviceaccount:gpustack-system:worker")
    assert learn(server, token) == "system:serviceaccount:gpustack-system:worker"
    assert server.reviewed == ["eyJ.worker.token"]


def test_neither_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(IdentityUnknown):
        learn(Apiserver(self_review=False), tmp_path / "none")
    token = tmp_path / "token"
    token.write_text("x")
    with pytest.raises(IdentityUnknown):
        learn(Apiserver(self_review=False, token_user=None), token)
