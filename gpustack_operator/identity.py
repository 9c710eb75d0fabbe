"""The worker's own identity, learned at startup (model-delivery spec §3.2): a ``SelfSubjectReview``,
or, where the apiserver serves none (before 1.28), a ``TokenReview`` of the worker's own in-cluster
token. With neither the worker does not start — the ModelArtifact status guard would otherwise
refuse its own writes, or be tempted to allow everyone's."""

from __future__ import annotations

from pathlib import Path

from kube.client import ApiError, Client

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class IdentityUnknown(RuntimeError):
    pass


def learn(client: Client, token_file: Path = IN_CLUSTER_TOKEN) -> str:
    try:
        review = client.create({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        username = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        if username:
            return str(username)
    except ApiError as error:
        if error.status not in (404, 405):
            raise IdentityUnknown(f"SelfSubjectReview failed: {error}") from None
    if not token_file.is_file():
        raise IdentityUnknown(
            "the apiserver serves no SelfSubjectReview and there is no in-cluster token to review"
        )
    try:
        review = client.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token_file.read_text().strip()},
            }
        )
    except ApiError as error:
        raise IdentityUnknown(f"TokenReview of the worker's own token failed: {error.reason}") from None
    status = review.get("status") or {}
    username = (status.get("user") or {}).get("username")
    if not status.get("authenticated") or not username:
        raise IdentityUnknown("TokenReview did not authenticate the worker's own token")
    return str(username)
