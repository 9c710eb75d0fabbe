"""The stand-in's HTTP surface: health, models, completions (deterministic tokens) and metrics."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from standin.cli import Launch
from standin.weights import Model

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa")  # fmt: skip
DEFAULT_MAX_TOKENS = 16
DEVICE_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES",
                    "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")  # fmt: skip


def tokens(model: str, prompt: str, count: int) -> list[str]:
    """The same words for the same model, prompt and count, on every replica and every run."""
    out: list[str] = []
    seed = hashlib.sha256(f"{model}\0{prompt}".encode()).digest()
    while len(out) < count:
        out += [WORDS[b % len(WORDS)] for b in seed]
        seed = hashlib.sha256(seed).digest()
    return out[:count]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": status}}, status)


class Engine:
    def __init__(self, launch: Launch, model: Model) -> None:
        self.launch, self.model = launch, model
        self.created = int(time.time())
        self.requests = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0

    def _served(self, body: dict[str, Any]) -> str | JSONResponse:
        name = body.get("model")
        if name is None:
            return self.launch.names[0]
        if name not in self.launch.names:
            return _error(404, f"The model `{name}` does not exist.")
        return str(name)

    async def _body(self, request: Request) -> dict[str, Any] | JSONResponse:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as error:
            return _error(400, f"the request body is not JSON: {error}")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        return body

    def _count(self, body: dict[str, Any]) -> int | JSONResponse:
        raw = body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
            return _error(400, "max_tokens must be a positive integer")
        return raw

    def _usage(self, prompt: str, words: list[str]) -> dict[str, int]:
        prompt_tokens = len(prompt.split())
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.generated_tokens += len(words)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                "total_tokens": prompt_tokens + len(words)}  # fmt: skip

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        data = [{"id": name, "object": "model", "created": self.created, "owned_by": "gpustack-standin",
                 "root": str(self.model.path), "max_model_len": self.launch.number("--max-model-len", 4096)}
                for name in self.launch.names]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    @staticmethod
    def _chat_prompt(body: dict[str, Any]) -> str | JSONResponse:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            return _error(400, "each message must be an object with a string content")
        return "\n".join(m["content"] for m in messages)

    @staticmethod
    def _text_prompt(body: dict[str, Any]) -> str | JSONResponse:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else _error(400, "prompt must be a string")

    async def _generate(
        self, request: Request, prompt_of: Callable[[dict[str, Any]], str | JSONResponse]
    ) -> tuple[str, str, list[str]] | Response:
        """The served name, the prompt and its tokens of a completion request, or the refusal."""
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        prompt, name, count = prompt_of(body), self._served(body), self._count(body)
        for refusal in (prompt, name, count):
            if isinstance(refusal, Response):
                return refusal
        assert isinstance(prompt, str) and isinstance(name, str) and isinstance(count, int)
        return name, prompt, tokens(name, prompt, count)

    async def chat(self, request: Request) -> Response:
        generated = await self._generate(request, self._chat_prompt)
        if isinstance(generated, Response):
            return generated
        name, prompt, words = generated
        return JSONResponse({
            "id": f"chatcmpl-{hashlib.sha256(prompt.encode()).hexdigest()[:24]}",
            "object": "chat.completion", "created": int(time.time()), "model": name,
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": " ".join(words)}}],
            "usage": self._usage(prompt, words),
        })  # fmt: skip

    async def completions(self, request: Request) -> Response:
        generated = await self._generate(request, self._text_prompt)
        if isinstance(generated, Response):
            return generated
        name, prompt, words = generated
        return JSONResponse({
            "id": f"cmpl-{hashlib.sha256(prompt.encode()).hexdigest()[:24]}",
            "object": "text_completion", "created": int(time.time()), "model": name,
            "choices": [{"index": 0, "text": " ".join(words), "finish_reason": "length"}],
            "usage": self._usage(prompt, words),
        })  # fmt: skip

    async def metrics(self, request: Request) -> Response:
        p = "vllm:" if self.launch.engine == "vllm" else "sglang:"
        name = self.launch.names[0]
        lines = [
            f'{p}num_requests_running{{model_name="{name}"}} 0',
            f'{p}num_requests_waiting{{model_name="{name}"}} 0',
            f'{p}prompt_tokens_total{{model_name="{name}"}} {self.prompt_tokens}',
            f'{p}generation_tokens_total{{model_name="{name}"}} {self.generated_tokens}',
            f'{p}request_success_total{{model_name="{name}"}} {self.requests}',
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def about(self, request: Request) -> Response:
        """What this replica was started with: for the people and tests checking a deployment."""
        return JSONResponse({
            "engine": self.launch.engine, "role": self.launch.role, "model": self.launch.model,
            "servedNames": self.launch.names, "flags": self.launch.flags,
            "weights": {"path": str(self.model.path), "files": self.model.weight_files,
                        "bytes": self.model.weight_bytes},
            "devices": {v: os.environ[v] for v in DEVICE_VARIABLES if v in os.environ},
        })  # fmt: skip


def app(launch: Launch, model: Model) -> Starlette:
    engine = Engine(launch, model)
    return Starlette(routes=[
        Route("/health", engine.health),
        Route("/v1/models", engine.models),
        Route("/v1/chat/completions", engine.chat, methods=["POST"]),
        Route("/v1/completions", engine.completions, methods=["POST"]),
        Route("/metrics", engine.metrics),
        Route("/standin", engine.about),
    ])  # fmt: skip
