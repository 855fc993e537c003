"""The example server under HTTP load on PostgreSQL: each shipped SQL recipe vs the bare store.

    python benchmarks/bench_server.py                        # quick: 320 requests a variant
    python benchmarks/bench_server.py --requests 10000       # the issue's measure
    memstack bench server --recipes production --no-two-workers

For each variant it boots ``memstack serve`` (Starlette under uvicorn) in a new process
against PostgreSQL on loopback and drives HTTP from this process: ``--clients`` concurrent
clients with keep-alive, round-robin over ``--sessions`` sessions (four threads per user),
each request one turn of the server's own handler (build the request's session, then
``get_items()`` and ``add_items([user message, assistant message])``; no model). The
variants are

- ``bare``: the SDK's documented pattern, ``SQLAlchemySession(session_id,
  engine=one_shared_engine)``, served by the same handler (``memstack serve --bare``);
- every ``recipes/*.toml`` whose store is SQL, its store (and ``[memory]``) pointed at
  PostgreSQL, built per request with ``from_recipe`` as the server does. Secrets the
  recipes read get fresh keys; a model summariser gets a dummy key and an endpoint that
  nothing answers (sessions stay far below any summary trigger, so no call is made).

Each session first gets ``--warmup`` untimed turns (users of a recipe with long-term
memory first get one remembered preference). Reported per variant: throughput, p50/p95
latency, their ratios to bare, the server's RSS growth over the timed requests (the
uvicorn process and its workers, from ``/proc``) and how much of it the process cache
holds at the end (``GET /stats``: bounded by its budget, 64 MiB by default), the most
PostgreSQL connections the server held at once (``pg_stat_activity`` rows whose client
port is one of the server's sockets, sampled every 0.2 s) and failed requests (not HTTP
200, or no answer).

Then, unless ``--no-two-workers``: each variant again with ``--workers 2`` and no
keep-alive (a new connection per request): ``--rw-clients`` clients each send
``--rw-turns`` sequential turns to their own session. Every answer must show, as the
newest user message it read, the client's previous message (read-your-writes across
workers), and a final read must list the turns in order. Reported: failed requests and
read-your-writes violations.

A server that holds more than ``--connection-cap`` PostgreSQL connections is stopped and
its variant reported as aborted: the database is shared. Rows written (session ids and
memory scopes starting with this run's prefix) are deleted at the end. Prints
``skipped: …`` (exit 0) when PostgreSQL does not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import asyncpg
import httpx2

from memstack.crypto import generate_key
from memstack.serve.boot import BootError, Server, boot

ROOT = Path(__file__).resolve().parents[1]
URL = "postgresql://postgres@127.0.0.1:5432/test"
THREADS_PER_USER = 4
SAMPLE_EVERY = 0.2


@dataclass
class Variant:
    name: str
    args: list[str]  # for `memstack serve`
    memory: bool = False


@dataclass
class Result:
    name: str
    requests: int = 0
    failed: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    rss_growth_mb: float = 0.0
    cache_mb: float = 0.0
    max_connections: int = 0
    aborted: str = ""
    violations: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def quantile_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def dsn(url: str) -> str:
    """``url`` as asyncpg reads it (no SQLAlchemy driver suffix)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme.split('+')[0]}://{rest}"


# -- the variants -------------------------------------------------------------------------


def with_cache_budget(text: str, cache_mb: float) -> str:
    """A recipe's text with ``[cache] max_bytes`` set to ``cache_mb`` MiB, in place of its own."""
    kept, inside = [], False
    for line in text.splitlines():
        if line.startswith("["):  # a table header ends the one before it
            inside = line.split("#")[0].strip() == "[cache]"
        if not inside:
            kept.append(line)
    return "\n".join(kept) + f'\n\n[cache]\nmax_bytes = "{cache_mb}MiB"\n'


def sql_recipes(
    url: str, only: list[str] | None, cache_mb: int | None = None, copies: Path | None = None
) -> list[Variant]:
    """Every shipped recipe whose store is SQL, pointed at ``url``; with ``cache_mb``, a
    copy of each in ``copies`` with ``[cache] max_bytes`` set to that many MiB."""
    variants = []
    for path in sorted((ROOT / "recipes").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
        scheme = str(data["backend"]["url"]).partition("://")[0]
        if scheme in ("redis", "rediss", "unix"):
            continue
        if only and path.stem not in only:
            continue
        if cache_mb is not None and copies is not None:
            path = copies / path.name
            path.write_text(with_cache_budget(text, cache_mb), encoding="utf-8")
        args = [str(path), "--url", url]
        if "memory" in data:
            args += ["--memory-url", url]
        variants.append(Variant(path.stem, args, memory="memory" in data))
    return variants


def secrets_env() -> dict[str, str]:
    """A fresh key for every variable the shipped recipes read; a model endpoint unused."""
    env = {"OPENAI_API_KEY": "bench-no-calls", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    pattern = re.compile(r'(?:env|active)\s*=\s*"([A-Z][A-Z0-9_]*)"|older\s*=\s*\[([^\]]*)\]')
    for path in (ROOT / "recipes").glob("*.toml"):
        text = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        for single, listed in pattern.findall(text):
            for name in [single, *re.findall(r'"([A-Z][A-Z0-9_]*)"', listed)]:
                if name and name not in env:
                    env[name] = os.environ.get(name) or generate_key()
    return env


# -- watching the server ------------------------------------------------------------------


def pg_client_ports(pids: list[int], pg_port: int) -> list[int]:
    """Local ports of these processes' TCP connections to PostgreSQL (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pids[0]}/net/{table}") as lines:
                next(lines)
                for line in lines:
                    parts = line.split()
                    local, remote, inode = parts[1], parts[2], parts[9]
                    if int(remote.rsplit(":", 1)[1], 16) == pg_port and inode in inodes:
                        ports.append(int(local.rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


async def sample_connections(
    server: Server, pg: asyncpg.Connection, pg_port: int, result: Result, cap: int
) -> None:
    """Keep ``result.max_connections`` up to date; stop the server past ``cap``."""
    pids: list[int] = []
    for sample in itertools.count():
        if sample % 25 == 0:  # every 5 s: a scan of /proc costs the load generator time
            pids = server.pids()
        ports = pg_client_ports(pids, pg_port)
        seen = await pg.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY($1::int[])", ports
        )
        result.max_connections = max(result.max_connections, int(seen))
        if seen > cap:
            result.aborted = f"over {cap} PostgreSQL connections"
            server.process.terminate()
            return
        await asyncio.sleep(SAMPLE_EVERY)


# -- load -----------------------------------------------------------------------------------


def session_path(prefix: str, number: int) -> str:
    return f"/users/{prefix}u{number // THREADS_PER_USER}/threads/t{number % THREADS_PER_USER}"


async def post_turn(http: httpx2.AsyncClient, path: str, message: str) -> dict[str, Any]:
    answer = await http.post(path, json={"message": message})
    if answer.status_code != 200:
        raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
    body: dict[str, Any] = answer.json()
    return body


async def warm(server: Server, variant: Variant, prefix: str, args: argparse.Namespace) -> None:
    limits = httpx2.Limits(max_connections=args.clients)
    async with httpx2.AsyncClient(base_url=server.url, timeout=120, limits=limits) as http:
        if variant.memory:
            users = range((args.sessions + THREADS_PER_USER - 1) // THREADS_PER_USER)
            for user in users:
                fact = {"text": f"User {user} prefers short answers", "kind": "preference"}
                made = await http.post(f"/users/{prefix}u{user}/memories", json=fact)
                made.raise_for_status()
        todo = [n for _ in range(args.warmup) for n in range(args.sessions)]

        async def client() -> None:
            while todo:
                number = todo.pop()
                await post_turn(http, session_path(prefix, number), "warming up")

        await asyncio.gather(*(client() for _ in range(args.clients)))


async def load(server: Server, prefix: str, args: argparse.Namespace, result: Result) -> None:
    limits = httpx2.Limits(max_connections=args.clients)
    queue = list(range(args.requests))
    async with httpx2.AsyncClient(base_url=server.url, timeout=120, limits=limits) as http:

        async def client() -> None:
            while queue and not result.aborted:
                number = queue.pop() % args.sessions
                start = time.perf_counter()
                result.requests += 1
                try:
                    await post_turn(http, session_path(prefix, number), f"request {number}")
                except Exception as exc:  # every failure counts, and the first few show
                    result.failed += 1
                    if len(result.errors) < 3:
                        result.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                result.latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(args.clients)))
        result.seconds = time.perf_counter() - start


async def read_your_writes(
    server: Server, prefix: str, args: argparse.Namespace, result: Result
) -> None:
    """Sequential turns per client, a new connection each: every answer saw the last one."""

    async def client(number: int) -> None:
        path = f"/users/{prefix}w{number}/threads/t0"
        previous = None
        for turn in range(args.rw_turns):
            if result.aborted:
                return
            message = f"client {number} turn {turn}"
            result.requests += 1
            start = time.perf_counter()
            try:  # no keep-alive: each request opens its own connection, any worker takes it
                async with httpx2.AsyncClient(base_url=server.url, timeout=120) as http:
                    body = await post_turn(http, path, message)
            except Exception as exc:
                result.failed += 1
                if len(result.errors) < 3:
                    result.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue  # an unacknowledged write: the next turn may not expect it
            result.latencies.append(time.perf_counter() - start)
            if body.get("last_user_message") != previous:
                result.violations += 1
            previous = message
        async with httpx2.AsyncClient(base_url=server.url, timeout=120) as http:
            items = (await http.get(path)).json()["items"]
        said = [i["content"] for i in items if i.get("role") == "user"]
        expected = [f"client {number} turn {t}" for t in range(args.rw_turns)]
        if not said or said != expected[len(expected) - len(said) :]:  # a window keeps a tail
            result.violations += 1

    start = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(args.rw_clients)))
    result.seconds = time.perf_counter() - start


# -- one variant ----------------------------------------------------------------------------


async def run_variant(
    variant: Variant, args: argparse.Namespace, env: dict[str, str], *, workers: int
) -> Result:
    result = Result(variant.name)
    prefix = f"{args.prefix}{variant.name[:6]}{workers}"
    pg = await asyncpg.connect(dsn(args.url))
    pg_port = urlparse(dsn(args.url)).port or 5432
    sampler: asyncio.Task[None] | None = None
    try:
        with (
            tempfile.TemporaryDirectory() as cwd,
            boot(
                [*variant.args, "--workers", str(workers), "--log-level", "warning"],
                env=env,
                cwd=cwd,
                timeout=120,
            ) as server,
        ):
            if workers == 1:
                await warm(server, variant, prefix, args)
            rss_before = server.rss_bytes()
            sampler = asyncio.create_task(
                sample_connections(server, pg, pg_port, result, args.connection_cap)
            )
            if workers == 1:
                await load(server, prefix, args, result)
            else:
                await read_your_writes(server, prefix, args, result)
            result.rss_growth_mb = (server.rss_bytes() - rss_before) / 1e6
            if workers == 1:
                result.cache_mb = await cache_bytes(server) / 1e6
            sampler.cancel()
    except BootError as exc:
        result.aborted = f"did not boot: {str(exc).splitlines()[0]}"
    finally:
        if sampler is not None:
            sampler.cancel()
        await pg.close()
    return result


async def cache_bytes(server: Server) -> int:
    """What the server's process cache holds now (``GET /stats``): part of its RSS growth."""
    async with httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
        return int((await http.get("/stats")).json()["cache"]["bytes"])


async def clean_up(url: str, prefix: str) -> None:
    """Delete every row this run wrote: session ids and memory scopes start with ``prefix``."""
    pg = await asyncpg.connect(dsn(url))
    try:
        columns = await pg.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name IN ('session_id', 'scope') "
            "AND (table_name LIKE 'agent_%' OR table_name LIKE 'memstack_memor%')"
        )
        # Children before parents: messages and terms before sessions and memories.
        parents = ("agent_sessions", "memstack_memories")
        order = sorted(columns, key=lambda row: row["table_name"] in parents)
        for row in order:
            await pg.execute(
                f'DELETE FROM "{row["table_name"]}" WHERE "{row["column_name"]}" LIKE $1',
                f"{prefix}%",
            )
    finally:
        await pg.close()


# -- report ---------------------------------------------------------------------------------


def report(results: list[Result], pairs: list[Result], args: argparse.Namespace) -> str:
    bare = next((r for r in results if r.name == "bare"), None)
    lines = [
        f"{args.requests} timed requests a variant ({args.clients} clients with keep-alive, "
        f"{args.sessions} sessions, {args.warmup} warm-up turn(s) each), one uvicorn worker; "
        f"PostgreSQL on loopback; load average {os.getloadavg()[0]:.1f}"
        + (f"; recipes' cache budget {args.cache_mb} MiB" if args.cache_mb else ""),
        "",
        "| variant | req/s | × bare | p50 ms | p95 ms | p95 × bare | RSS +MB | of it cache MB "
        "| PG conns max | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if r.aborted and not r.latencies:
            lines.append(f"| {r.name} | aborted: {r.aborted} | | | | | | | {r.max_connections} | |")
            continue
        ratio = r.throughput / bare.throughput if bare and bare.throughput else float("nan")
        p95 = r.quantile_ms(0.95) / bare.quantile_ms(0.95) if bare else float("nan")
        note = f" (aborted: {r.aborted})" if r.aborted else ""
        lines.append(
            f"| {r.name}{note} | {r.throughput:.1f} | {ratio:.2f} | {r.quantile_ms(0.5):.0f} "
            f"| {r.quantile_ms(0.95):.0f} | {p95:.2f} | {r.rss_growth_mb:+.1f} | {r.cache_mb:.1f} "
            f"| {r.max_connections} | {r.failed}/{r.requests} |"
        )
    if pairs:
        lines += [
            "",
            f"Two uvicorn workers, no keep-alive: {args.rw_clients} clients × {args.rw_turns} "
            "sequential turns, each client its own session",
            "",
            "| variant | failed | read-your-writes violations | p50 ms | PG conns max |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for r in pairs:
            note = f" (aborted: {r.aborted})" if r.aborted else ""
            lines.append(
                f"| {r.name}{note} | {r.failed}/{r.requests} | {r.violations} "
                f"| {r.quantile_ms(0.5):.0f} | {r.max_connections} |"
            )
    for r in [*results, *pairs]:
        for error in r.errors:
            lines.append(f"\n{r.name}: {error}")
    return "\n".join(lines)


async def reachable(url: str) -> str | None:
    try:
        async with asyncio.timeout(5):
            pg = await asyncpg.connect(dsn(url))
            await pg.close()
    except Exception as exc:  # any failure to connect means: skip
        return f"{type(exc).__name__}: {exc}"
    return None


async def run(args: argparse.Namespace) -> int:
    problem = await reachable(args.url)
    if problem is not None:
        print(f"skipped: PostgreSQL not reachable at {args.url} ({problem})")
        return 0
    env = secrets_env()
    chosen = args.recipes.split(",") if args.recipes else None
    copies = Path(tempfile.mkdtemp(prefix="bench-server-recipes-"))
    recipes = sql_recipes(args.url, chosen, args.cache_mb, copies)
    variants = [Variant("bare", ["--bare", args.url]), *recipes]
    results: list[Result] = []
    pairs: list[Result] = []
    try:
        for variant in variants:
            print(f"  {variant.name}: one worker…", file=sys.stderr)
            results.append(await run_variant(variant, args, env, workers=1))
            r = results[-1]
            print(f"    {r.throughput:.1f} req/s, {r.failed} failed, {r.max_connections} "
                  f"PG connections {r.aborted}", file=sys.stderr)  # fmt: skip
        if not args.no_two_workers:
            for variant in variants:
                print(f"  {variant.name}: two workers…", file=sys.stderr)
                pairs.append(await run_variant(variant, args, env, workers=2))
    finally:
        await clean_up(args.url, args.prefix)
        shutil.rmtree(copies, ignore_errors=True)
    print(report(results, pairs, args))
    if args.json:
        write_json(Path(args.json), results, pairs)
    return 0


def write_json(path: Path, results: list[Result], pairs: list[Result]) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "variant": r.name,
                    "workers": 1 if r in results else 2,
                    "requests": r.requests,
                    "failed": r.failed,
                    "throughput": r.throughput,
                    "p50_ms": r.quantile_ms(0.5),
                    "p95_ms": r.quantile_ms(0.95),
                    "median_ms": statistics.median(r.latencies) * 1e3 if r.latencies else None,
                    "rss_growth_mb": r.rss_growth_mb,
                    "cache_mb": r.cache_mb,
                    "max_pg_connections": r.max_connections,
                    "read_your_writes_violations": r.violations,
                    "aborted": r.aborted,
                }
                for r in [*results, *pairs]
            ],
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMSTACK_BENCH_PG", URL))
    parser.add_argument("--requests", type=int, default=320, help="timed requests a variant")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients")
    parser.add_argument("--sessions", type=int, default=160)
    parser.add_argument("--warmup", type=int, default=1, help="untimed turns per session")
    parser.add_argument("--recipes", help="comma-separated recipe names (default: every SQL one)")
    parser.add_argument("--no-two-workers", action="store_true")
    parser.add_argument("--rw-clients", type=int, default=12)
    parser.add_argument("--rw-turns", type=int, default=25)
    parser.add_argument(
        "--connection-cap",
        type=int,
        default=60,
        help="stop a server holding more PostgreSQL connections (the database is shared)",
    )
    parser.add_argument(
        "--cache-mb",
        type=int,
        help="serve copies of the recipes with [cache] max_bytes of this many MiB "
        "(default: each recipe's own, 64 MiB when it sets none)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    args.prefix = f"bs{uuid.uuid4().hex[:6]}"
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
