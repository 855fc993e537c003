"""``memstack memory …``: list, show, search, forget, consolidate and export a scope's memories.

    $ memstack memory list recipes/personal-assistant.toml --scope user-42
    $ memstack memory search recipes/personal-assistant.toml --scope user-42 "diet"
    $ memstack memory consolidate recipes/personal-assistant.toml --scope user-42 --dry-run
    $ memstack memory forget recipes/personal-assistant.toml --scope user-42 --all

Every command opens the recipe's ``[memory]`` store (resolving its key), runs, and closes it;
``forget --all`` and ``forget --id`` need no key (they match plain columns, so a retention
job runs without the secrets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstack.cli_table import counted
from memstack.errors import ConfigurationError
from memstack.memory.models import Memory
from memstack.memory.store import MemoryStore

__all__ = ["add_memory_commands"]

Handler = Callable[[MemoryStore, argparse.Namespace], Coroutine[Any, Any, int]]


def memories(count: int) -> str:
    return counted(count, "memory", "memories")


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M")


def _row(memory: Memory) -> str:
    flags = "".join(
        flag
        for flag, on in (
            ("S", memory.superseded_at is not None),
            ("R", memory.needs_review),
            ("E", memory.expires_at is not None),
        )
        if on
    )
    key = f" [{memory.key}]" if memory.key else ""
    return (
        f"{memory.id}  {memory.kind:<10} {memory.source:<8} {memory.confidence:.2f} "
        f"{_when(memory.updated_at)} {flags:<3}{key} {memory.text}"
    )


async def _list(store: MemoryStore, args: argparse.Namespace) -> int:
    for memory in await store.list_memories(args.scope, kind=args.kind, include_inactive=args.all):
        print(_row(memory))
    return 0


async def _show(store: MemoryStore, args: argparse.Namespace) -> int:
    memory = await store.get(args.scope, args.id)
    if memory is None:
        raise ConfigurationError(f"no memory {args.id!r} in scope {args.scope!r}")
    print(json.dumps(memory.as_dict(), indent=2, ensure_ascii=False))
    print("history:")
    for event in await store.history(args.id):
        print(
            f"  {_when(event.at)}  {event.action:<11} by {event.actor}  {json.dumps(event.detail)}"
        )
    return 0


async def _search(store: MemoryStore, args: argparse.Namespace) -> int:
    found = await store.recall(args.scope, args.query, max_tokens=args.tokens)
    print(found.text or "(nothing recalled)")
    print(f"\n{memories(len(found))}, {found.tokens} tokens", file=sys.stderr)
    return 0


async def _forget(store: MemoryStore, args: argparse.Namespace) -> int:
    if not (args.id or args.key or args.all):
        raise ConfigurationError("give --id, --key, or --all to forget the whole scope")
    count = await store.forget(args.scope, args.id, key=args.key, actor="cli")
    if args.id and not count:  # one id typed by hand: a typo should not pass for success
        raise ConfigurationError(f"no memory {args.id!r} in scope {args.scope!r}")
    print(f"forgot {memories(count)} of scope {args.scope!r}")
    return 0


async def _consolidate(store: MemoryStore, args: argparse.Namespace) -> int:
    changes = await store.consolidate(args.scope, dry_run=args.dry_run, actor="cli")
    for change in changes:
        print(change.describe())
    verb = "would change" if args.dry_run else "changed"
    print(f"{verb} {memories(len(changes))} of scope {args.scope!r}", file=sys.stderr)
    return 0


async def _embed(store: MemoryStore, args: argparse.Namespace) -> int:
    count = await store.embed_missing(args.scope)
    print(f"embedded {memories(count)} of scope {args.scope!r}")
    return 0


async def _export(store: MemoryStore, args: argparse.Namespace) -> int:
    found = await store.list_memories(args.scope, include_inactive=True)
    text = "".join(json.dumps(m.as_dict(), ensure_ascii=False) + "\n" for m in found)
    if args.output:
        await asyncio.to_thread(Path(args.output).write_text, text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    print(f"exported {memories(len(found))} of scope {args.scope!r}", file=sys.stderr)
    return 0


def _runner(handler: Handler) -> Callable[[argparse.Namespace], Coroutine[Any, Any, int]]:
    async def run(args: argparse.Namespace) -> int:
        from memstack.recipes import load_recipe

        # Forgetting a whole scope or an id needs no key; by key it needs the key's digest.
        keys = not (args.memory_command == "forget" and args.key is None)
        store: MemoryStore = load_recipe(args.recipe).open_memory(keys=keys)
        try:
            return await handler(store, args)
        finally:
            await store.close()

    return run


def add_memory_commands(commands: Any) -> None:
    """Add ``memory`` and its subcommands to the CLI's subparsers."""
    memory = commands.add_parser(
        "memory", help="long-term memories of a scope", description="long-term memories"
    )
    which = memory.add_subparsers(dest="memory_command", required=True, metavar="ACTION")

    def add(name: str, handler: Handler, text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = which.add_parser(name, help=text, description=text)
        sub.set_defaults(handler=_runner(handler))
        sub.add_argument("recipe", help="recipe file (TOML) with a [memory] table")
        sub.add_argument("--scope", required=True, help="the user or namespace")
        return sub

    listing = add("list", _list, "list memories, oldest first")
    listing.add_argument("--kind", help="only this kind")
    listing.add_argument("--all", action="store_true", help="include superseded and expired")
    add("show", _show, "one memory and its audit trail").add_argument("id")
    search = add("search", _search, "what recall would inject for a query")
    search.add_argument("query")
    search.add_argument("--tokens", type=int, default=500, help="token budget")
    forget = add("forget", _forget, "delete one memory, a key, or the whole scope")
    forget.add_argument("--id", help="the memory id")
    forget.add_argument("--key", help="every memory under this key")
    forget.add_argument("--all", action="store_true", help="the whole scope")
    consolidate = add("consolidate", _consolidate, "merge, supersede, expire and flag")
    consolidate.add_argument("--dry-run", action="store_true", help="show the changes only")
    export = add("export", _export, "write every memory of the scope as JSON Lines")
    export.add_argument("-o", "--output", help="file to write (default: standard output)")
    add("embed", _embed, "embed memories written before the [memory] embedder was set")
