"""The example server: a stack per request from a recipe, long-term memory, one lifespan.

    $ memstack serve recipes/dev-sqlite.toml --port 8000
    $ curl -X POST localhost:8000/users/ana/threads/t1 -d '{"message": "Hello"}'
    $ curl localhost:8000/users/ana/threads/t1

Routes:

- ``GET  /users/{user}/threads/{thread}``: the thread's view, ``{"items": [...]}``;
- ``POST /users/{user}/threads/{thread}`` ``{"message": "..."}``: one turn —
  ``get_items()``, an answer, ``add_items([user message, assistant message])`` (or an SDK
  run doing both, when a model is configured);
- ``POST /users/{user}/memories`` ``{"text": "...", "kind": "preference"}``: remember a
  fact about the user (recipes with a ``[memory]`` table); the memory layer pins it at
  the head of that user's threads;
- ``GET  /healthz``;
- ``GET  /stats``: what the process shares between stacks: the process cache (bytes, its
  budget, hits, misses, entries and evictions per kind) and the open engines and model
  clients. Expose it to operators only: it names no data, but it is not for the public.

The session id is ``"{user}:{thread}"``. Shutdown releases the server's own resources,
then ``memstack.dispose()`` what the process shares between stacks.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import memstack
from memstack import cache, resources
from memstack.errors import ConfigurationError, MemstackError
from memstack.history import is_user_message
from memstack.serve.reply import AgentReply, Echo, Reply
from memstack.serve.sessions import BareSessions, RecipeSessions, Sessions

__all__ = ["ENV", "app_from_env", "create_app"]

logger = logging.getLogger("memstack.serve")

# The configuration `memstack serve` hands each uvicorn worker (workers import the app).
ENV = {
    "recipe": "MEMSTACK_SERVE_RECIPE",
    "url": "MEMSTACK_SERVE_URL",
    "memory_url": "MEMSTACK_SERVE_MEMORY_URL",
    "bare": "MEMSTACK_SERVE_BARE",
    "model": "MEMSTACK_SERVE_MODEL",
}


class BadRequest(Exception):
    """The request body is not what the route reads."""


def _text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


async def _body(request: Request, *required: str) -> dict[str, str]:
    """The JSON object sent, with each ``required`` field a non-empty string."""
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        raise BadRequest("the body must be a JSON object") from exc
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    for field in required:
        if not isinstance(body.get(field), str) or not body[field]:
            raise BadRequest(f"field {field!r} must be a non-empty string")
    return body


def create_app(sessions: Sessions, *, reply: Reply | None = None) -> Starlette:
    """The server over ``sessions``; ``reply`` answers turns (default: ``Echo``)."""
    answerer: Reply = reply if reply is not None else Echo()

    async def history(request: Request) -> JSONResponse:
        user, thread = request.path_params["user"], request.path_params["thread"]
        session = sessions.open(user, thread)
        return JSONResponse({"items": await session.get_items()})

    async def turn(request: Request) -> JSONResponse:
        user, thread = request.path_params["user"], request.path_params["thread"]
        message = (await _body(request, "message"))["message"]
        session = sessions.open(user, thread)  # built per request
        if answerer.reads_and_writes:
            return JSONResponse({"reply": await answerer.answer(session, [], message)})
        items = await session.get_items()
        answer = await answerer.answer(session, items, message)
        await session.add_items(
            [{"role": "user", "content": message}, {"role": "assistant", "content": answer}]
        )
        users = [item for item in items if is_user_message(item)]
        return JSONResponse(
            {
                "reply": answer,
                "seen": len(items),
                # What the client checks read-your-writes with: its previous message.
                "last_user_message": _text(users[-1]) if users else None,
                "memory": any(item.get("role") == "developer" for item in items),
            }
        )

    async def remember(request: Request) -> JSONResponse:
        if not sessions.keeps_memory:
            return JSONResponse({"error": "this server keeps no long-term memory"}, 404)
        body = await _body(request, "text")
        kind = str(body.get("kind", "note"))
        memory_id = await sessions.remember(request.path_params["user"], body["text"], kind)
        return JSONResponse({"id": memory_id}, status_code=201)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "serving": sessions.describe(), "pid": os.getpid()})

    async def stats(request: Request) -> JSONResponse:
        kinds = {str(name): vars(counts) for name, counts in cache.stats().items()}
        shared = resources.stats()
        return JSONResponse(
            {
                "pid": os.getpid(),
                "cache": {
                    "bytes": cache.total_bytes(),
                    "max_bytes": cache.max_bytes(),
                    "kinds": kinds,
                },
                "engines": shared.engines,
                "model_clients": shared.model_clients,
                "redis_clients": shared.redis_clients,
            }
        )

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

    async def failed(request: Request, exc: Exception) -> JSONResponse:
        logger.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await sessions.start()
        logger.info("memstack serve: %s", sessions.describe())
        try:
            yield
        finally:
            await answerer.aclose()
            await sessions.aclose()
            await memstack.dispose()
            logger.info("memstack serve: resources disposed")

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/stats", stats),
            Route("/users/{user}/threads/{thread}", history, methods=["GET"]),
            Route("/users/{user}/threads/{thread}", turn, methods=["POST"]),
            Route("/users/{user}/memories", remember, methods=["POST"]),
        ],
        # A ConfigurationError at request time is a bad value sent (a memory kind, …).
        exception_handlers={
            BadRequest: bad_request,
            ConfigurationError: bad_request,
            MemstackError: failed,
        },
        lifespan=lifespan,
    )


def app_from_env() -> Starlette:
    """The app ``memstack serve`` configured through ``MEMSTACK_SERVE_*`` (a uvicorn factory).

    ``uvicorn --factory memstack.serve:app_from_env`` with ``MEMSTACK_SERVE_RECIPE`` set
    serves a recipe; ``MEMSTACK_SERVE_BARE=<SQL URL>`` serves the bare SDK store instead.
    """
    # uvicorn's own handler: the lifespan's lines appear with uvicorn's.
    logger.handlers = logging.getLogger("uvicorn").handlers
    logger.propagate = not logger.handlers
    logger.setLevel(logging.INFO)
    env = {name: os.environ.get(variable) or None for name, variable in ENV.items()}
    sessions: Sessions
    if env["bare"]:
        sessions = BareSessions(env["bare"])
    elif env["recipe"]:
        sessions = RecipeSessions(env["recipe"], url=env["url"], memory_url=env["memory_url"])
    else:
        raise memstack.ConfigurationError(
            f"set {ENV['recipe']} (a recipe file) or {ENV['bare']} (a SQL URL)"
        )
    reply = AgentReply(model=env["model"]) if env["model"] else None
    return create_app(sessions, reply=reply)
