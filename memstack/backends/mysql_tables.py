"""The SDK's two session tables, created on MySQL/MariaDB with the column lengths it requires.

The SDK's schema declares VARCHAR without a length, which MySQL and MariaDB refuse;
``MySQLSQLAlchemySession`` creates the same tables through this instead.
"""

from __future__ import annotations

from typing import Any

from memstack.backends.translate import store_errors

__all__ = ["prepare_mysql_tables"]


async def prepare_mysql_tables(engine: Any, sessions_table: str, messages_table: str) -> None:
    """Create the SDK's two tables on MySQL/MariaDB, with column lengths MySQL requires."""
    from sqlalchemy import (
        TIMESTAMP,
        Column,
        ForeignKey,
        Index,
        Integer,
        MetaData,
        String,
        Table,
        Text,
    )
    from sqlalchemy import text as sql_text
    from sqlalchemy.dialects.mysql import LONGTEXT

    metadata = MetaData()
    now = sql_text("CURRENT_TIMESTAMP")
    Table(
        sessions_table,
        metadata,
        Column("session_id", String(255), primary_key=True),
        Column("created_at", TIMESTAMP, server_default=now, nullable=False),
        Column("updated_at", TIMESTAMP, server_default=now, nullable=False),
    )
    Table(
        messages_table,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column(
            "session_id",
            String(255),
            ForeignKey(f"{sessions_table}.session_id", ondelete="CASCADE"),
            nullable=False,
        ),
        # Tool outputs often exceed TEXT's 64 KiB on MySQL.
        Column("message_data", Text().with_variant(LONGTEXT(), "mysql", "mariadb"), nullable=False),
        Column("created_at", TIMESTAMP, server_default=now, nullable=False),
        Index(f"idx_{messages_table}_session_time", "session_id", "created_at"),
    )
    with store_errors(engine):
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
