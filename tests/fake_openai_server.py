"""A small OpenAI-compatible HTTP server on 127.0.0.1, scriptable per endpoint.

    with FakeOpenAI() as server:
        server.chat.append(Status(500))          # the next chat call fails…
        server.chat.append(Text("## Goal …"))    # …the one after answers
        client = server.client()                 # a real openai.AsyncOpenAI

Serves ``POST /v1/chat/completions`` and ``POST /v1/responses/compact``. Each endpoint
has a queue of scripted behaviours (``Text``, ``Json``, ``Status``, ``Hang``,
``Garbage``); when its queue is empty it answers with a default: for chat a summary that
counts the CALL lines it was sent, for compact the input's user messages plus one
compaction item. Every request body is recorded in ``requests`` as ``(path, json)``.
Standard library only: ``http.server`` in a daemon thread.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai import AsyncOpenAI

CHAT = "/v1/chat/completions"
COMPACT = "/v1/responses/compact"


@dataclass(frozen=True)
class Text:
    """A successful answer with this text (chat) or these output items (compact)."""

    content: Any


@dataclass(frozen=True)
class Json:
    """HTTP 200 with exactly this JSON body."""

    body: Any


@dataclass(frozen=True)
class Status:
    """An HTTP error status with an OpenAI-style error body."""

    code: int
    message: str = "scripted failure"


@dataclass(frozen=True)
class Hang:
    """Answer only after ``seconds`` (or when the server stops)."""

    seconds: float = 30.0


@dataclass(frozen=True)
class Garbage:
    """HTTP 200 whose body is not JSON at all."""

    body: bytes = b"<html>upstream proxy error</html>"


Behaviour = Text | Json | Status | Hang | Garbage


def default_summary(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    calls = sum(line.startswith("CALL ") for line in prompt.splitlines())
    return f"## Goal\nKeep going.\n## Progress\n{calls} tool calls so far.\n## Facts\n-\n## Open\n-"


def default_compaction(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input") or []
    users = [
        {
            "type": "message",
            "role": "user",
            "status": "completed",
            "id": f"msg_{i}",
            "content": [{"type": "input_text", "text": str(item.get("content"))}],
        }
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("role") == "user"
    ]
    seal = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:24]
    return [*users, {"type": "compaction", "id": f"cmp_{seal[:8]}", "encrypted_content": seal}]


@dataclass
class FakeOpenAI:
    """The server; use as a context manager."""

    chat: deque[Behaviour] = field(default_factory=deque)
    compact: deque[Behaviour] = field(default_factory=deque)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> FakeOpenAI:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # type: ignore[attr-defined]
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server with `with FakeOpenAI() as server`"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def client(self, **options: Any) -> AsyncOpenAI:
        options.setdefault("max_retries", 0)
        options.setdefault("timeout", 60.0)  # "should not hang": generous
        return AsyncOpenAI(base_url=self.url, api_key="test-key", **options)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for p, body in self.requests if p == path]

    # -- serving ------------------------------------------------------------------------
    def _handle(self, http: BaseHTTPRequestHandler) -> None:
        length = int(http.headers.get("Content-Length") or 0)
        try:
            body = json.loads(http.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        path = http.path
        queue = {CHAT: self.chat, COMPACT: self.compact}.get(path)
        if queue is None:
            self._send(http, 404, {"error": {"message": f"no route {path}"}})
            return
        with self._lock:
            self.requests.append((path, body))
            behaviour = queue.popleft() if queue else None
        if isinstance(behaviour, Hang):
            self._stopping.wait(behaviour.seconds)
            behaviour = None
        if isinstance(behaviour, Status):
            self._send(
                http,
                behaviour.code,
                {"error": {"message": behaviour.message, "type": "server_error"}},
            )
        elif isinstance(behaviour, Garbage):
            self._send_raw(http, 200, behaviour.body)
        elif isinstance(behaviour, Json):
            self._send(http, 200, behaviour.body)
        elif path == CHAT:
            text = behaviour.content if isinstance(behaviour, Text) else default_summary(body)
            self._send(http, 200, _completion(body, text))
        else:
            output = behaviour.content if isinstance(behaviour, Text) else default_compaction(body)
            self._send(http, 200, _compacted(output))

    @staticmethod
    def _send(http: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        FakeOpenAI._send_raw(http, status, json.dumps(payload).encode())

    @staticmethod
    def _send_raw(http: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        try:
            http.send_response(status)
            http.send_header("Content-Type", "application/json")
            http.send_header("Content-Length", str(len(data)))
            http.end_headers()
            http.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass


def _completion(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _compacted(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_compact_fake",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": {
            "input_tokens": 1,
            "output_tokens": 1,
            "total_tokens": 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
