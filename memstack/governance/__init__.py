"""Governance over a whole store: forget a user, retention and rotation jobs, the audit trail.

    import asyncio
    from memstack.governance import forget_user

    report = asyncio.run(forget_user("recipes/production.toml", "user-42"))
    print(report)   # forgot user 'user-42': removed 3 vault entries, 2 sessions, 41 items

Modules: ``users`` (which session ids belong to a user), ``erasers`` (one kind of user
data each, with the long-term memory hook), ``forget`` (run erasers, audit, report),
``jobs`` (recipe-bound store-wide jobs, used by the command line), ``shred`` (per-user
keys for crypto-shredding).
"""

from memstack.governance.erasers import (
    Eraser,
    ErasureRequest,
    LongTermMemoryEraser,
    SessionEraser,
    VaultEraser,
    memory_eraser,
)
from memstack.governance.forget import ForgetReport, default_erasers, forget
from memstack.governance.jobs import JobReport, StoreJobs, forget_user
from memstack.governance.shred import UserKeyEraser, UserKeys
from memstack.governance.users import UserSessions

__all__ = [
    "Eraser",
    "ErasureRequest",
    "ForgetReport",
    "JobReport",
    "LongTermMemoryEraser",
    "SessionEraser",
    "StoreJobs",
    "UserKeyEraser",
    "UserKeys",
    "UserSessions",
    "VaultEraser",
    "default_erasers",
    "forget",
    "forget_user",
    "memory_eraser",
]
