"""The Pod cases through the offline admission chain (what ``admit`` runs); the same cases go
through a real kube-apiserver in tests/e2e/test_admission_pods.py."""

from __future__ import annotations

import asyncio

import pytest

from tests.cases import pods
from webhooks import chain
from webhooks.lookups import FileLookups


@pytest.mark.parametrize("case", pods.CASES, ids=lambda c: c.id)
def test_pod_case_offline(case):
    outcome = asyncio.run(chain.run(pods.case_pod(case), FileLookups(pods.INSTANCE_TYPES)))
    assert outcome.allowed == case.allowed, outcome.message
    if case.allowed:
        assert pods.stored_limit_problems(case, outcome.object) == []
        # Reinvocation: running the chain on its own output changes nothing more.
        again = asyncio.run(chain.run(outcome.object, FileLookups(pods.INSTANCE_TYPES)))
        assert again.patch == []
    else:
        assert case.path in outcome.message
        if case.code:
            assert outcome.code == case.code
