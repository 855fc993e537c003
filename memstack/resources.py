"""What a process shares between stacks, and the one call that releases it at shutdown.

    >>> import asyncio, memstack
    >>> asyncio.run(memstack.dispose())

Call ``await memstack.dispose()`` once, when the process stops serving (an ASGI lifespan's
shutdown, the end of a script). Today the only process-wide resource is the process cache
(``memstack.cache``); engines and model clients still belong to the stack that opened them.
"""

from __future__ import annotations

from memstack.cache import clear as clear_cache

__all__ = ["dispose"]


async def dispose() -> None:
    """Release what this process shares between stacks; safe to call more than once."""
    clear_cache()
