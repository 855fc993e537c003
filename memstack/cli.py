"""The ``memstack`` command line: recipes, sessions, maintenance, the demo.

    $ memstack validate recipes/dev-sqlite.toml              # no secret needed
    $ memstack inspect recipes/dev-sqlite.toml --session user-42
    $ memstack export recipes/dev-sqlite.toml --session user-42 -o user-42.jsonl

Exit codes: 0 success; 1 the operation failed (store unreachable, wrong key, …);
2 bad usage or an invalid recipe; 130 interrupted; 141 (128 + SIGPIPE, as a shell reports
``yes | head -1``) standard output closed by its reader. Errors are one line on stderr;
``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from agents.memory import Session

from memstack import __version__
from memstack.backends.capabilities import READ_ALL
from memstack.backends.translate import store_errors
from memstack.base import SessionLayer, full_history_layer, iter_chain, limit_arg
from memstack.cli_table import counted
from memstack.cli_table import table as _table
from memstack.errors import (
    ConfigurationError,
    ItemValidationError,
    MemstackError,
    MissingDriverError,
    RecipeError,
    UnknownUserError,
)
from memstack.formats import written_by
from memstack.history import item_type, read_only, stored_history, validate_items
from memstack.progress import progress_bar

if TYPE_CHECKING:
    from memstack.recipes import Recipe

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_CLOSED_PIPE = 0, 1, 2, 130, 141
_IMPORT_BATCH = 500

# Most commands are coroutines; one that runs its own event loop (serve) returns an int.
Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int] | int]


def _open(args: argparse.Namespace) -> Session:
    from memstack.recipes import load_recipe

    overrides = {"url": args.url} if getattr(args, "url", None) else {}
    return load_recipe(args.recipe, **overrides).build(args.session)


async def _close(session: Session) -> None:
    backend = list(iter_chain(session))[-1]
    close = getattr(backend, "close", None)
    if callable(close):
        result = close()
        if asyncio.iscoroutine(result):
            await result
    engine = getattr(backend, "engine", None)
    if engine is not None:
        await engine.dispose()


@asynccontextmanager
async def _using(session: Session) -> AsyncIterator[Session]:
    """``session``, closed afterwards, its store's own failures raised as ``BackendError``.

    Layers translate what passes through their Session methods; this also covers a recipe
    with no layer and the maintenance methods the CLI calls. Print after the block: a
    closed stdout is not a store failure.
    """
    try:
        with store_errors(list(iter_chain(session))[-1]):
            yield session
    finally:
        await _close(session)


def _label(session: Session) -> str:
    return type(session).__name__


async def cmd_validate(args: argparse.Namespace) -> int:
    from memstack.recipes import load_recipe

    recipe = load_recipe(args.recipe)
    unresolved = recipe.validate(resolve=args.resolve)
    if not args.resolve:
        _warn_of_an_unloadable_scheme(recipe.url)
        _warn_of_a_missing_memory_driver(recipe)
    session = args.session or recipe.sample_session_id()
    scope = recipe.memory_scope(session)  # a session id naming no user fails here
    print(f"ok: {recipe.source}")
    print(f"stack (bottom → top): {recipe.describe()}")
    if scope is not None:
        print(f"memory scope: session {session!r} → scope {scope!r}")
    if unresolved:
        print("secrets checked for form only, not read (--resolve reads them):")
        for reference in unresolved:
            print(f"  {reference}")
    return EXIT_OK


def _warn_of_an_unloadable_scheme(url: str) -> None:
    """Without ``--resolve`` a scheme no backend loads passes (a dialect may be a plugin
    this machine lacks), but a bare "ok" would wave a typo through to production."""
    from memstack.backends.open import check_url

    try:
        check_url(url)
    except ConfigurationError as exc:
        print(f"warning: [backend]: {exc} (an error with --resolve)", file=sys.stderr)


def _warn_of_a_missing_memory_driver(recipe: Recipe) -> None:
    """Without ``--resolve`` a ``[memory]`` driver this machine lacks passes, as a
    ``[backend]`` one does: CI need not install every production driver."""
    from memstack.memory.database import load_driver

    if not recipe.memory:
        return
    try:
        load_driver(recipe.memory["url"])
    except MissingDriverError as exc:
        print(
            f"warning: {recipe.source}: [memory]: {exc} (an error with --resolve)",
            file=sys.stderr,
        )
    except ConfigurationError as exc:  # no machine could open it: named as with --resolve
        raise RecipeError(f"{recipe.source}: [memory]: {exc}") from exc


@asynccontextmanager
async def _looking() -> AsyncIterator[None]:
    """Reads that write nothing (``read_only``): a look through another recipe than the one
    that wrote a session must not convert it (TTL would date its history)."""
    with read_only():
        yield


async def cmd_inspect(args: argparse.Namespace) -> int:
    from memstack.tokens import TokenCounter

    counter = TokenCounter(args.model)
    async with _using(_open(args)) as stack, _looking():
        rows = []
        for session in iter_chain(stack):
            items = await session.get_items(limit=READ_ALL)
            rows.append((_label(session), len(items), counter.count_items(items)))
        view = await stack.get_items(**limit_arg(args.limit))
    print(f"session {stack.session_id!r}: {stack!r}\n")
    print(_table(["layer (top → store)", "items", "tokens"], rows))
    print(f"\nwhat the model is sent ({counted(len(view), 'item')}):")
    print(
        _table(
            ["#", "kind", "tokens", "content"],
            [
                (
                    n,
                    item_type(item) if "type" in item else item.get("role", "?"),
                    counter.count_items([item]),
                    json.dumps(item, ensure_ascii=False)[:60],
                )
                for n, item in enumerate(view)
            ],
        )
    )
    return EXIT_OK


async def cmd_stats(args: argparse.Namespace) -> int:
    from memstack.backends import capabilities_of
    from memstack.tokens import TokenCounter

    counter = TokenCounter(args.model)
    async with _using(_open(args)) as stack, _looking():
        history = await full_history_layer(stack).get_items(limit=READ_ALL)
        view = await stack.get_items()
        caps = capabilities_of(list(iter_chain(stack))[-1])
        rows = [
            ("stored rows", await caps.count()),
            ("history items", len(history)),
            ("history tokens", counter.count_items(history)),
            ("view items", len(view)),
            ("view tokens", counter.count_items(view)),
            ("store adapter", f"{type(caps).__name__} (atomic={caps.atomic})"),
        ]
    print(_table(["stat", "value"], rows))
    return EXIT_OK


def _find_method(stack: Session, method: str) -> Any:
    for session in iter_chain(stack):
        if isinstance(session, SessionLayer) and callable(getattr(session, method, None)):
            return getattr(session, method)
    raise ConfigurationError(f"no layer in this recipe has {method}()")


async def _layer_operation(
    args: argparse.Namespace, method: str, done: str, noun: str = "item"
) -> int:
    """Open the recipe's stack and run ``method`` of the first layer that has it."""
    async with _using(_open(args)) as stack:
        count = await _find_method(stack, method)()
    print(done.format(items=counted(count, noun), session=stack.session_id))
    return EXIT_OK


async def cmd_purge(args: argparse.Namespace) -> int:
    if args.all:
        from memstack.cli_governance import purge_all

        return await purge_all(args)
    if args.older_than:
        return await _purge_by_store_time(args)
    return await _layer_operation(
        args, "purge_expired", "purged {items} from session {session!r}", "expired item"
    )


async def _purge_by_store_time(args: argparse.Namespace) -> int:
    """Key-free retention: the store's own write times, no layer, no secret."""
    from memstack.layers.ttl import purge_written_before
    from memstack.recipes import load_recipe, parse_duration

    recipe = load_recipe(args.recipe, **({"url": args.url} if args.url else {}))
    async with _using(recipe.open_store(args.session)) as store:
        purged = await purge_written_before(store, older_than=parse_duration(args.older_than))
    print(
        f"purged {counted(purged, 'row')} older than {args.older_than} from session "
        f"{args.session!r} (store write times; no key used)"
    )
    return EXIT_OK


async def cmd_repair(args: argparse.Namespace) -> int:
    """Show, and with --remove delete, stored values that are not items (no key needed)."""
    from memstack.backends import capabilities_of
    from memstack.recipes import load_recipe

    recipe = load_recipe(args.recipe, **({"url": args.url} if args.url else {}))
    async with _using(recipe.open_store(args.session)) as store:
        stored: list[Any] = list(await store.get_items(limit=READ_ALL))
        bad = [index for index, value in enumerate(stored) if not isinstance(value, dict)]
        if bad and args.remove:
            # In place, oldest rows only: run it while the session is idle.
            last = bad[-1] + 1
            kept = [value for value in stored[:last] if isinstance(value, dict)]
            await capabilities_of(store).replace_oldest(last, kept)
    rows = [
        (index, len(stored) - index, type(stored[index]).__name__, repr(stored[index])[:60])
        for index in bad
    ]
    if rows:
        print(_table(("index", "from newest", "type", "value"), rows))
    if bad and args.remove:
        print(f"removed {len(bad)} stored values that are not items from {args.session!r}")
    else:
        hint = " (pass --remove to delete them)" if bad else ""
        print(f"{len(bad)} of {len(stored)} stored values are not items{hint}")
    return EXIT_OK


async def cmd_rotate(args: argparse.Namespace) -> int:
    if args.all:
        from memstack.cli_governance import rotate_all

        return await rotate_all(args)
    return await _layer_operation(
        args, "rotate", "re-encrypted {items} of session {session!r} under the active key"
    )


async def cmd_adopt(args: argparse.Namespace) -> int:
    """Bring the recipe's layers onto history written before them: one session, or all."""
    from memstack.adoption import adopt_stack
    from memstack.backends.whole_store import whole_store
    from memstack.recipes import load_recipe

    recipe = load_recipe(args.recipe, **({"url": args.url} if args.url else {}))
    if args.all:
        # Any id: the listing covers the store.
        async with _using(recipe.open_store("memstack-adopt")) as probe:
            ids = [info.session_id for info in await whole_store(probe).list_sessions()]
    else:
        ids = [args.session]
    for session_id in ids:
        async with _using(recipe.build(session_id)) as stack:
            counts = await adopt_stack(stack, allow_non_atomic=args.allow_non_atomic)
        done = ", ".join(f"{layer} {count}" for layer, count in counts.items())
        print(f"session {session_id!r}: items adopted by {done or 'no layer (views need none)'}")
    print(f"adopted {len(ids)} session(s)")
    return EXIT_OK


async def cmd_export(args: argparse.Namespace) -> int:
    async with _using(_open(args)) as stack, _looking():
        with stored_history():  # exactly what is stored, even a history the API would refuse
            items = await full_history_layer(stack).get_items(limit=READ_ALL)
    text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    if args.output:
        await asyncio.to_thread(Path(args.output).write_text, text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    exported = counted(len(items), "item")
    print(f"exported {exported} of session {stack.session_id!r}", file=sys.stderr)
    return EXIT_OK


async def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        lines = (await asyncio.to_thread(path.read_text, encoding="utf-8")).splitlines()
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read: {exc.strerror}") from exc
    items = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{path}:{number}: not JSON: {exc.msg}") from exc
            try:
                validate_items(items[-1:])
            except ItemValidationError as exc:  # NaN, a lone surrogate: named by its line
                reason = exc.reason.removeprefix("item 0 ")
                raise ConfigurationError(f"{path}:{number}: {reason}") from exc
    async with _using(_open(args)) as stack:
        _refuse_foreign_lines(path, items, stack)
        target = full_history_layer(stack)
        if args.replace:
            await target.clear_session()
        bar = progress_bar(len(items), "import")
        try:
            for start in range(0, len(items), _IMPORT_BATCH):
                batch = items[start : start + _IMPORT_BATCH]
                await target.add_items(batch)
                if bar is not None:
                    bar.update(len(batch))
        finally:  # cleared before an error is printed, which then starts its own line
            if bar is not None:
                bar.close()
    print(f"imported {counted(len(items), 'item')} into session {stack.session_id!r}")
    return EXIT_OK


def _refuse_foreign_lines(path: Path, items: list[Any], stack: Session) -> None:
    """An export holds items, and compaction's records where the stack had compaction
    (they sit in its history as stored); any other layer's record, stored as an item,
    would reach the model or stop every later read (``ForeignRecordError``)."""
    reads = {"CompactionSession"} & {type(layer).__name__ for layer in iter_chain(stack)}
    for number, item in enumerate(items, start=1):
        layer = written_by(item)
        if layer is not None and layer not in reads:
            raise ConfigurationError(
                f"{path}:{number}: a {layer} record, which no layer of this stack reads "
                "as an imported line; export through the recipe that wrote it, and import "
                "into a stack with the same layers (or leave such lines out)"
            )


async def cmd_demo(args: argparse.Namespace) -> int:
    from memstack.demo import run_demo

    await run_demo(args.url, session_id=args.session)
    return EXIT_OK


SCRIPT_BENCHMARKS = (
    "overhead",
    "scale",
    "load",
    "window",
    "encrypted",
    "ttl",
    "server",
    "writers",
)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the example server under uvicorn (blocking: uvicorn runs its own event loop)."""
    try:
        import uvicorn

        from memstack.serve.app import ENV
    except ImportError as exc:
        raise ConfigurationError(
            f"memstack serve needs the server extra: pip install 'memstack[server]' ({exc})"
        ) from exc
    if (args.recipe is None) == (args.bare is None):
        raise ConfigurationError("give a recipe file, or --bare URL (not both)")
    if args.recipe is not None:  # a bad recipe or a missing secret: one line, before uvicorn
        from memstack.serve.sessions import RecipeSessions

        recipe = RecipeSessions(args.recipe, url=args.url, memory_url=args.memory_url).recipe
        recipe.validate(resolve=True)
    chosen = {
        "recipe": args.recipe,
        "url": args.url,
        "memory_url": args.memory_url,
        "bare": args.bare,
        "model": args.model,
    }
    for name, value in chosen.items():  # workers are new processes: they read these
        os.environ.pop(ENV[name], None)
        if value:
            os.environ[ENV[name]] = value
    uvicorn.run(
        "memstack.serve.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
    )
    return EXIT_OK


async def cmd_bench(args: argparse.Namespace) -> int:
    from memstack.bench.checkout import CHECKOUT_HINT, find_checkout
    from memstack.bench.tokens_bench import run_tokens_bench

    if args.bench == "memory":
        from memstack.bench.memory_bench import run_memory_bench

        files = [Path(f) for f in args.files]
        await run_memory_bench(
            files,
            tokens=args.tokens,
            out=Path(args.out),
            semantic=not args.no_embedder,
            embedder=args.embedder,
        )
        return EXIT_OK
    if args.bench != "tokens":
        checkout = find_checkout()
        if checkout is None:
            raise ConfigurationError(
                f"memstack bench {args.bench} runs benchmarks/bench_{args.bench}.py, which "
                f"needs a checkout (its recipes and the shared data): {CHECKOUT_HINT}"
            )
        script = checkout / "benchmarks" / f"bench_{args.bench}.py"
        process = await asyncio.create_subprocess_exec(sys.executable, str(script), *args.extra)
        return await process.wait()

    await run_tokens_bench(
        [Path(f) for f in args.files] or None,
        quick=args.quick,
        model=args.model,
        prices=Path(args.prices) if args.prices else None,
        out=Path(args.out),
        real_summaries=args.real_summaries,
        recipes=[Path(r) for r in args.recipe],
    )
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memstack", description="Composable session layers for the OpenAI Agents SDK."
    )
    parser.add_argument("--version", action="version", version=f"memstack {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, handler: Command, help: str, *, session: bool = True, every: bool = False
    ) -> Any:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        if session:
            sub.add_argument("recipe", help="recipe file (TOML)")
            which = sub.add_mutually_exclusive_group(required=True) if every else sub
            which.add_argument("--session", required=not every, help="session id")
            if every:
                which.add_argument("--all", action="store_true", help="every session of the store")
            sub.add_argument("--url", help="store URL, overriding the recipe's")
        return sub

    validate = add("validate", cmd_validate, "validate a recipe and show its stack", session=False)
    validate.add_argument("recipe", help="recipe file (TOML)")
    validate.add_argument(
        "--resolve",
        action="store_true",
        help="also read every secret reference (environment variables, key providers) "
        "as building the stack would; by default none is needed",
    )
    validate.add_argument(
        "--session", help="show the memory scope this session id gets (default: an example)"
    )
    for name, handler, text in (
        ("inspect", cmd_inspect, "show a session's items and what each layer shows"),
        ("stats", cmd_stats, "counts and token totals of a session"),
    ):
        sub = add(name, handler, text)
        sub.add_argument("--model", default="gpt-4.1", help="model whose tokenizer to count with")
        if name == "inspect":
            sub.add_argument("--limit", type=int, help="show only the last N items of the view")
    repair = add("repair", cmd_repair, "show (and remove) stored values that are not items")
    repair.add_argument("--remove", action="store_true", help="delete them from the store")
    purge = add("purge", cmd_purge, "delete a session's expired items now (TTL layer)", every=True)
    purge.add_argument(
        "--older-than",
        metavar="AGE",
        help="instead, delete rows the store wrote over AGE ago (e.g. 30d), reading no item: "
        "no key needed; SQL stores only",
    )
    add(
        "rotate",
        cmd_rotate,
        "re-encrypt a session under the active key (Encrypted layer)",
        every=True,
    )
    adopt = add(
        "adopt",
        cmd_adopt,
        "bring history written before the layers into their format (TTL dates it, "
        "encryption seals it)",
        session=False,
    )
    adopt.add_argument("recipe", help="recipe file (TOML)")
    which_sessions = adopt.add_mutually_exclusive_group(required=True)
    which_sessions.add_argument("--session", help="session id")
    which_sessions.add_argument(
        "--all", action="store_true", help="every session of the store (SQL stores, Redis)"
    )
    adopt.add_argument("--url", help="store URL, overriding the recipe's")
    adopt.add_argument(
        "--allow-non-atomic",
        action="store_true",
        help="on a store without atomic rewrites, clear and refill each session",
    )
    export = add("export", cmd_export, "write a session's full history as JSON Lines")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    imp = add("import", cmd_import, "add items from a JSON Lines file to a session")
    imp.add_argument("file", help="JSON Lines file, one item per line")
    imp.add_argument("--replace", action="store_true", help="clear the session first")
    from memstack.cli_governance import add_commands

    add_commands(add)
    demo = add(
        "demo", cmd_demo, "run a multi-turn agent conversation through a stack", session=False
    )
    demo.add_argument("--url", default="sqlite:///memstack-demo.db", help="store URL")
    demo.add_argument("--session", default="demo", help="session id")
    serve = add(
        "serve",
        cmd_serve,
        "run the example server: a stack per request from a recipe (Starlette, uvicorn)",
        session=False,
    )
    serve.add_argument("recipe", nargs="?", help="recipe file (TOML)")
    serve.add_argument("--url", help="store URL, overriding the recipe's")
    serve.add_argument("--memory-url", help="long-term memory URL, overriding the recipe's")
    serve.add_argument(
        "--bare",
        metavar="URL",
        help="serve the bare SDK store instead: SQLAlchemySession over one shared engine",
    )
    serve.add_argument(
        "--model",
        help="answer turns with an agent on this model (OPENAI_API_KEY, OPENAI_BASE_URL); "
        "default: echo the message, no model call",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    bench = add("bench", cmd_bench, "run a benchmark (see benchmarks/README.md)", session=False)
    which = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    tokens = which.add_parser(
        "tokens",
        help="replay transcripts through each strategy and price every model call",
        description="Replay JSONL transcripts turn by turn through baselines and memstack "
        "stacks; print cost (cache-aware), invalid histories and a retention proxy.",
    )
    tokens.add_argument("files", nargs="*", help="JSONL transcripts (default: ../shared/data)")
    tokens.add_argument("--quick", action="store_true", help="a sample of each file")
    tokens.add_argument("--model", default="gpt-4o", help="model to tokenise and price for")
    tokens.add_argument("--prices", help="TOML/JSON price table overriding the defaults")
    tokens.add_argument("--out", default="bench-results", help="directory for CSV/JSON/PNG")
    tokens.add_argument(
        "--real-summaries",
        action="store_true",
        help="summarise with the recipes' model (needs OPENAI_API_KEY, and OPENAI_BASE_URL "
        "for another OpenAI-compatible endpoint; costs money); default: the deterministic "
        "extractive summariser, labelled as such",
    )
    tokens.add_argument(
        "--recipe",
        action="append",
        default=[],
        metavar="RECIPE.toml",
        help="your own recipe (repeatable): its view-shaping layers (compaction, window) run "
        "against the baselines instead of the shipped recipes",
    )
    memory = which.add_parser("memory", help="LoCoMo evidence recall of long-term memory")
    memory.add_argument("files", nargs="*", help="LoCoMo JSONL (default: locomo_dev.jsonl)")
    memory.add_argument("--tokens", type=int, default=1000, help="injected token budget")
    memory.add_argument(
        "--no-embedder",
        action="store_true",
        help="skip the hybrid strategy (full-text fused with the offline MiniLM embedder)",
    )
    memory.add_argument(
        "--embedder",
        default="default",
        help="embedder of the hybrid strategy: default (int8 ONNX MiniLM), minilm "
        "(sentence-transformers, needs the embed extra), hashing",
    )
    memory.add_argument("--out", default="bench-memory", help="directory for JSON/table/PNG")
    from memstack.memory.cli import add_memory_commands

    add_memory_commands(commands)
    for name in SCRIPT_BENCHMARKS:
        which.add_parser(  # --help too goes to the script, which lists its own options
            name,
            help=f"run benchmarks/bench_{name}.py from a checkout (its own options follow)",
            add_help=False,
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A model loaded for semantic recall (transformers, the Hugging Face hub) draws progress
    # bars on stderr that bury the command's own output; a user can still ask for them.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # Script benchmarks take their own options; everywhere else an unknown option is an error.
    if extra and not (args.command == "bench" and args.bench in SCRIPT_BENCHMARKS):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        outcome = args.handler(args)
        code = int(asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome)
        sys.stdout.flush()  # now, not at exit, so that a reader gone early is handled below
        return code
    except BrokenPipeError:
        # `memstack export … | head -1`: the reader has what it wanted. Python's recipe:
        # point stdout at devnull, or the interpreter's last flush fails again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # one line for every failure; the traceback on --debug
        if args.debug:
            raise
        if _unopenable_path(exc):  # a file the user named: bad input, named as such
            print(f"memstack: error: {exc.filename}: cannot open: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
        usage = isinstance(exc, ConfigurationError | UnknownUserError)  # bad input
        kind = "" if isinstance(exc, MemstackError) else f"{type(exc).__name__}: "
        print(f"memstack: error: {kind}{exc}".splitlines()[0], file=sys.stderr)
        return EXIT_USAGE if usage else EXIT_FAILED


def _unopenable_path(exc: BaseException) -> TypeGuard[OSError]:
    """A file or folder that does not exist or may not be opened, with its name."""
    missing = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
    return isinstance(exc, missing) and exc.filename is not None


if __name__ == "__main__":
    sys.exit(main())
