"""Locust users for every webhook endpoint, sending the realistic mix of ``loadtests.mix``.

Against a worker started with file lookups (see docs/performance.md, "Locust"):

    locust -f loadtests/locustfile.py --headless -u 16 -r 8 -t 30s \\
        --host https://127.0.0.1:PORT --only-summary

A response counts as a failure when it is not a well-formed AdmissionReview answering the request's
uid, when a review the mix expects to be allowed is refused (or the reverse), or when a decision is
an internal error.
"""

from __future__ import annotations

import random
import uuid

import orjson
from locust import FastHttpUser, events, task

from loadtests import mix

POD_VALIDATE = "/validate-gpustack-worker-core-v1-pod"
POD_MUTATE = "/mutate-gpustack-worker-core-v1-pod"
MD_VALIDATE = "/validate-gpustack-worker-worker-gpustack-ai-v1-modeldeployment"
MD_MUTATE = "/mutate-gpustack-worker-worker-gpustack-ai-v1-modeldeployment"
INSTANCE_TYPE_VALIDATE = "/validate-gpustack-worker-worker-gpustack-ai-v1-instancetype"

PODS = [(label, mix.review(pod)) for label, pod in mix.pods()]
MDS = [(label, mix.review(obj, old)) for label, obj, old in mix.model_deployments()]
TYPES = [("instancetype", mix.review(t)) for t in mix.TYPES]


def _expected(label: str, path: str) -> bool:
    # The mutating halves refuse only what they cannot fold; refusals of the mix are validation's.
    return not label.startswith("refused") or path in (POD_MUTATE, MD_MUTATE)


@events.init_command_line_parser.add_listener
def _options(parser) -> None:  # type: ignore[no-untyped-def]
    parser.add_argument(
        "--pause",
        type=float,
        default=0.01,
        help="a user's pause between two tasks is drawn from 0 to this many seconds (default 0.01: "
        "as fast as answers come; a smoke run passes more, so it runs every task without filling "
        "the machine)",
    )


class AdmissionUser(FastHttpUser):
    insecure = True  # the worker's self-issued certificate

    def wait_time(self) -> float:
        return random.uniform(0, self.environment.parsed_options.pause)

    def _post(self, path: str, label: str, review: dict) -> None:
        review = dict(review, request=dict(review["request"], uid=str(uuid.uuid4())))
        with self.client.post(
            path,
            data=orjson.dumps(review),
            headers={"Content-Type": "application/json"},
            name=f"{path} [{label}]",
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            answer = orjson.loads(response.content)["response"]
            if answer["uid"] != review["request"]["uid"]:
                response.failure("answer names another uid")
            elif not answer["allowed"] and answer["status"]["code"] >= 500:
                response.failure(f"internal error: {answer['status']['message']}")
            elif answer["allowed"] != _expected(label, path):
                response.failure(f"allowed={answer['allowed']} for {label}")
            else:
                response.success()

    @task(6)
    def pod_validate(self) -> None:
        for label, review in PODS:
            self._post(POD_VALIDATE, label, review)

    @task(6)
    def pod_mutate(self) -> None:
        for label, review in PODS:
            self._post(POD_MUTATE, label, review)

    @task(2)
    def model_deployment(self) -> None:
        for label, review in MDS:
            self._post(MD_VALIDATE, label, review)
            self._post(MD_MUTATE, label, review)

    @task(1)
    def instance_type(self) -> None:
        for label, review in TYPES:
            self._post(INSTANCE_TYPE_VALIDATE, label, review)
