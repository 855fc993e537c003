"""Which sessions belong to a user: a session-id pattern such as ``"{user}:{thread}"``.

    >>> from memstack.governance.users import UserSessions
    >>> owner = UserSessions("{user}:{thread}")
    >>> owner.owns("ann", "ann:support-1"), owner.owns("ann", "anna:t1")
    (True, False)
    >>> owner.user_of("ann:support-1")
    'ann'

The pattern holds ``{user}`` once and may hold ``{thread}`` once; everything else is
literal. A user id may not contain the text that follows ``{user}`` in the pattern
(``:`` by default): otherwise user ``ann:x`` would own user ``ann``'s thread ``x:…``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memstack.errors import ConfigurationError

__all__ = ["DEFAULT_PATTERN", "UserSessions"]

DEFAULT_PATTERN = "{user}:{thread}"
_PLACEHOLDER = re.compile(r"\{(\w*)\}")


@dataclass(frozen=True)
class UserSessions:
    """The session ids of a user, by pattern."""

    pattern: str = DEFAULT_PATTERN
    _parts: list[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise ConfigurationError(f"user_sessions must be a string, got {self.pattern!r}")
        names = _PLACEHOLDER.findall(self.pattern)
        if names.count("user") != 1 or names.count("thread") > 1 or set(names) - {"user", "thread"}:
            raise ConfigurationError(
                f"user_sessions {self.pattern!r} must hold {{user}} once and may hold "
                '{thread} once, e.g. "{user}:{thread}"'
            )
        if "{user}{thread}" in self.pattern or "{thread}{user}" in self.pattern:
            raise ConfigurationError(
                f"user_sessions {self.pattern!r}: put a separator between {{user}} and {{thread}}"
            )
        object.__setattr__(self, "_parts", _PLACEHOLDER.split(self.pattern))

    @property
    def separator(self) -> str:
        """The literal text right after ``{user}`` (a user id may not contain it)."""
        index = self._parts.index("user")
        return self._parts[index + 1] if index + 1 < len(self._parts) else ""

    def check_user(self, user: object) -> str:
        if not isinstance(user, str) or not user.strip():
            raise ConfigurationError("user id must be a non-empty string")
        if self.separator and self.separator in user:
            raise ConfigurationError(
                f"user id {user!r} contains {self.separator!r}, the separator after {{user}} "
                f"in user_sessions {self.pattern!r}"
            )
        return user

    def _regex(self, user: str | None) -> re.Pattern[str]:
        pieces = []
        for index, part in enumerate(self._parts):
            if index % 2 == 0:
                pieces.append(re.escape(part))
            elif part == "user":
                pieces.append(re.escape(user) if user is not None else "(?P<user>.+?)")
            else:
                pieces.append(".+")
        return re.compile("".join(pieces), re.DOTALL)

    def owns(self, user: str, session_id: str) -> bool:
        return self._regex(self.check_user(user)).fullmatch(session_id) is not None

    def user_of(self, session_id: str) -> str | None:
        match = self._regex(None).fullmatch(session_id)
        return match["user"] if match else None
