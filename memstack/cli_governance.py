"""Whole-store commands: ``sessions``, ``forget``, ``audit``, and ``purge``/``rotate --all``.

    $ memstack sessions recipes/production.toml
    $ memstack purge recipes/production.toml --all
    $ memstack forget recipes/production.toml --user user-42
    $ memstack audit recipes/production.toml --limit 20

Hooked into ``memstack.cli`` by ``add_commands``; errors and exit codes are the CLI's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from memstack.cli_table import counted, table
from memstack.governance.jobs import StoreJobs

__all__ = ["add_commands", "purge_all", "rotate_all"]

EXIT_OK = 0


def _jobs(args: argparse.Namespace) -> StoreJobs:
    from memstack.recipes import load_recipe

    recipe = load_recipe(args.recipe, **({"url": args.url} if args.url else {}))
    return StoreJobs(recipe, actor=getattr(args, "actor", None))


def _when(value: datetime | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = datetime.fromtimestamp(value, tz=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, not {text!r}")
    return value


def _counts(counts: Any) -> str:
    return ", ".join(f"{name}={n}" for name, n in counts.items()) or "-"


async def cmd_sessions(args: argparse.Namespace) -> int:
    async with _jobs(args) as jobs:
        infos = await jobs.sessions(args.user)
    print(
        table(
            ["session", "items", "last activity (UTC)"],
            [(info.session_id, info.items, _when(info.last_activity)) for info in infos],
        )
    )
    print(f"{counted(len(infos), 'session')}, {counted(sum(info.items for info in infos), 'item')}")
    return EXIT_OK


async def cmd_forget(args: argparse.Namespace) -> int:
    async with _jobs(args) as jobs:
        report = await jobs.forget_user(args.user, missing_ok=args.missing_ok)
    print(report)
    if report.audit is not None:
        print(f"audit record {report.audit.record_id} (scope {report.audit.scope})")
    return EXIT_OK


async def cmd_audit(args: argparse.Namespace) -> int:
    async with _jobs(args) as jobs:
        records = await jobs.audit(args.limit, session=args.session, user=args.user)
    print(
        table(
            ["time (UTC)", "action", "actor", "scope", "counts", "digest"],
            [
                (_when(r.at), r.action, r.actor, r.scope, _counts(r.counts), (r.digest or "-")[:16])
                for r in records
            ],
        )
    )
    print(counted(len(records), "record"))
    return EXIT_OK


async def purge_all(args: argparse.Namespace) -> int:
    from memstack.recipes import parse_duration

    older_than = parse_duration(args.older_than).total_seconds() if args.older_than else None
    async with _jobs(args) as jobs:
        report = await jobs.purge_all(older_than=older_than)
    what = (
        f"{counted(report.total, 'row')} older than {args.older_than} "
        "(store write times; no key used)"
        if args.older_than
        else counted(report.total, "expired item")
    )
    vault = counted(report.extra["vault_entries"], "vault entry", "vault entries")
    print(
        f"purged {what} from {counted(len(report.per_session), 'session')}; "
        f"removed {vault} of emptied sessions"
    )
    return EXIT_OK


async def rotate_all(args: argparse.Namespace) -> int:
    async with _jobs(args) as jobs:
        report = await jobs.rotate_all()
    items, sessions = counted(report.total, "item"), counted(len(report.per_session), "session")
    print(
        f"re-encrypted {items} in {sessions} "
        f"under the active key; re-sealed {report.extra['vault_entries']} vault entries"
    )
    return EXIT_OK


def add_commands(add: Callable[..., Any]) -> None:
    """Register the whole-store commands through the CLI's own ``add`` helper."""

    def store_command(name: str, handler: Any, text: str) -> Any:
        sub = add(name, handler, text, session=False)
        sub.add_argument("recipe", help="recipe file (TOML)")
        sub.add_argument("--url", help="store URL, overriding the recipe's")
        return sub

    sessions = store_command("sessions", cmd_sessions, "list the sessions of a store")
    sessions.add_argument("--user", help="only this user's sessions ([governance] user_sessions)")
    forget = store_command(
        "forget", cmd_forget, "delete every session, vault entry and memory of one user"
    )
    forget.add_argument("--user", required=True, help="user id")
    forget.add_argument("--actor", help="who asks, for the audit trail (default user@host)")
    forget.add_argument(
        "--missing-ok", action="store_true", help="succeed when the user has nothing stored"
    )
    audit = store_command("audit", cmd_audit, "show the audit trail of a store")
    audit.add_argument("--limit", type=_count, default=50, help="show the last N records")
    which = audit.add_mutually_exclusive_group()
    which.add_argument("--session", help="only this session's records (needs audit_key)")
    which.add_argument("--user", help="only this user's erasure records (needs audit_key)")
