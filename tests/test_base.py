"""The layer base: identity, wrapper forwarding, chain walking, repr, error translation."""

from __future__ import annotations

import pytest
from agents import RunContextWrapper
from agents.memory import SessionSettings, SQLiteSession

from memstack import (
    BackendError,
    ConfigurationError,
    LayerSpec,
    PassthroughSession,
    SessionLayer,
    build_stack,
    find,
    iter_chain,
    open_backend,
)
from memstack.base import fresh
from memstack.testing import InMemorySession

from .sessions import PlainSession


def test_session_id_comes_from_the_store():
    stack = PassthroughSession(PassthroughSession(InMemorySession("abc")))
    assert stack.session_id == "abc"


def test_session_settings_are_the_stores():
    store = InMemorySession("s")
    stack = PassthroughSession(store)
    assert stack.session_settings is store.session_settings
    stack.session_settings = SessionSettings(limit=3)
    assert store.session_settings == SessionSettings(limit=3)


async def test_wrapper_reaches_a_store_that_declares_it():
    store = InMemorySession("s")
    stack = PassthroughSession(PassthroughSession(store))
    wrapper = RunContextWrapper(context={"user": 1})
    await stack.add_items([{"role": "user", "content": "x"}], wrapper=wrapper)
    assert store.last_wrapper is wrapper
    await stack.get_items(wrapper=wrapper)
    assert store.last_wrapper is wrapper
    await stack.get_items()
    assert store.last_wrapper is None


async def test_wrapper_is_not_passed_to_a_store_that_does_not_declare_it():
    store = PlainSession()
    stack = PassthroughSession(store)
    wrapper = RunContextWrapper(context=None)
    await stack.add_items([{"role": "user", "content": "x"}], wrapper=wrapper)
    assert await stack.get_items(wrapper=wrapper) == [{"role": "user", "content": "x"}]
    assert await stack.pop_item(wrapper=wrapper) == {"role": "user", "content": "x"}
    await stack.clear_session(wrapper=wrapper)


def test_layers_declare_wrapper_so_the_sdk_passes_it():
    from agents.memory.session import _session_accepts_wrapper

    assert _session_accepts_wrapper(PassthroughSession(PlainSession()))


def test_walking_the_chain_reaches_the_backend():
    store = SQLiteSession("s")
    inner = PassthroughSession(store)
    top = PassthroughSession(inner)
    assert list(top) == [top, inner, store]
    assert list(iter_chain(store)) == [store]
    assert top.backend is store
    assert top.find(SQLiteSession) is store
    assert find(top, PassthroughSession) is top
    assert top.find(InMemorySession) is None


def test_repr_shows_the_chain_bottom_to_top():
    stack = PassthroughSession(PassthroughSession(SQLiteSession("s1", db_path=":memory:")))
    assert repr(stack) == (
        "SQLiteSession(session_id='s1', db_path=':memory:') → PassthroughSession() → "
        "PassthroughSession()"
    )


def test_repr_hides_passwords_in_urls():
    store = open_backend("postgresql://app:hunter2@127.0.0.1:1/db", "s")
    assert "hunter2" not in repr(PassthroughSession(store))


def test_inner_must_be_a_session():
    with pytest.raises(ConfigurationError, match="PassthroughSession: inner must be an Agents"):
        PassthroughSession(object())  # type: ignore[arg-type]


async def test_unreachable_database_raises_backend_error_naming_the_layer():
    # Nothing listens on port 1 of loopback.
    store = open_backend("postgresql://postgres@127.0.0.1:1/test", "s")
    stack = PassthroughSession(store)
    with pytest.raises(BackendError) as caught:
        await stack.get_items()
    message = str(caught.value)
    assert message.startswith("PassthroughSession session 's': SQLAlchemySession failed:")
    assert caught.value.__cause__ is not None
    await store.engine.dispose()


async def test_memstack_errors_pass_through_layers_unchanged():
    class Failing(SessionLayer):
        async def get_items(self, limit=None, *, wrapper=None):
            raise ConfigurationError("bad", layer="Failing")

    with pytest.raises(ConfigurationError, match=r"^Failing: bad$"):
        await PassthroughSession(Failing(InMemorySession("s"))).get_items()


async def test_layer_methods_keep_their_signature_for_the_sdk():
    import inspect

    params = inspect.signature(PassthroughSession.get_items).parameters
    assert list(params) == ["self", "limit", "wrapper"]


async def test_adapters_read_what_is_stored_not_the_repaired_view() -> None:
    """A rewrite through the generic adapter must keep what the top's view leaves out."""
    from memstack import GenericCapabilities, PassthroughSession
    from memstack.testing import InMemorySession

    orphan = {"type": "function_call_output", "call_id": "gone", "output": "x"}
    items = [orphan, {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    store = InMemorySession("s")
    await store.add_items(items)  # type: ignore[arg-type]
    top = PassthroughSession(store)
    assert await top.get_items() == items[1:]  # the view leaves the orphan out
    caps = GenericCapabilities(top, allow_non_atomic=True)
    assert await caps.count() == 3
    assert await caps.delete_oldest(1) == 1  # deletes the orphan, not "a"
    assert store.rows and await store.get_items() == items[1:]


class NewestTwo:
    """A user's read policy written once, as a mixin, for layers of their own."""

    async def get_items(self, limit=None, *, wrapper=None):  # type: ignore[no-untyped-def]
        items = (await self.inner.get_items())[-2:]  # type: ignore[attr-defined]
        return items if limit is None else items[-limit:] if limit > 0 else []


class NewestTwoLayer(NewestTwo, SessionLayer):
    pass


@pytest.mark.parametrize("limit", [None, 5])
async def test_reads_from_above_cross_a_layer_whose_reads_come_from_a_mixin(
    limit: int | None,
) -> None:
    """A layer above that reads through capabilities (encryption, compaction) sees what
    the layer's ``get_items`` shows, wherever in its class that method is defined."""
    from memstack import EncryptedSession
    from memstack.crypto import generate_key
    from memstack.testing import sample_items

    store = InMemorySession("s")
    stack = EncryptedSession(NewestTwoLayer(store), key=generate_key())
    await stack.add_items(sample_items(6))  # type: ignore[arg-type]
    assert await stack.get_items(limit) == sample_items(6)[-2:]


class Own(PassthroughSession):
    """A layer of the user's own that reads its own way (a source for layers above)."""

    async def get_items(self, limit=None, *, wrapper=None):  # type: ignore[no-untyped-def]
        return await self.inner.get_items(limit)


async def test_a_read_through_a_layer_of_your_own_is_not_taken_for_the_whole_history() -> None:
    """The stack reads such a layer's newest n as it returns them: the top-of-stack repair
    dropping an output whose call the cut left out made the read look shorter than asked,
    so the stack took it for the whole history (and a compaction summary was lost)."""
    from memstack.base import read_view

    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c", "output": "x"}
    older = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    newest = [{"role": "user", "content": f"n{i}"} for i in range(3)]
    store = InMemorySession("s")
    await store.add_items([*older, call, output, *newest])  # type: ignore[list-item]
    above = PassthroughSession(Own(store))
    tail = await read_view(above, want=4, wrapper=None)
    assert not tail.complete or len(tail.items) == 9
    assert await above.get_items() == [*older, call, output, *newest]


async def test_what_a_read_returns_is_the_callers_own_to_change():
    # Two equal items share one cached object below the top (one content key); the
    # caller gets independent copies, nested values too, and the next read is unchanged.
    stack = build_stack(
        InMemorySession("s"),
        [LayerSpec("ttl", {"ttl": 3600}), LayerSpec("window", {"max_turns": 5})],
    )
    message = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await stack.add_items([message, {"role": "assistant", "content": "ok"}, dict(message)])
    first = await stack.get_items()
    assert first[0] == first[2] and first[0] is not first[2]
    assert first[0]["content"] is not first[2]["content"]
    first[0]["content"][0]["text"] = "changed"
    first[0]["content"].append({"type": "input_text", "text": "more"})
    first[1]["role"] = "user"
    assert first[2]["content"] == message["content"]
    assert await stack.get_items() == [message, {"role": "assistant", "content": "ok"}, message]


def test_fresh_copies_never_alias_what_the_originals_share():
    shared = [{"type": "input_text", "text": "x"}]
    items = [{"role": "user", "content": shared}, {"role": "user", "content": shared}]
    copies = fresh(items)
    assert copies == items
    assert copies[0]["content"] is not copies[1]["content"] is not shared
    assert copies[0]["content"][0] is not copies[1]["content"][0]


def test_fresh_copies_what_marshal_cannot_write_deeply():
    class Note(dict):  # type: ignore[type-arg]
        pass

    items = [Note(role="user", content=[{"text": "x"}]), {"role": "user", "content": {1.5, 2}}]
    copies = fresh(items)
    assert copies == items and type(copies[0]) is Note
    assert copies[0]["content"] is not items[0]["content"]
