"""Search terms of a text: words, lower-cased, stop words dropped, Snowball-stemmed.

    >>> from memstack.memory.text import terms, term_counts
    >>> terms("Caroline went to the LGBTQ support groups")
    ['carolin', 'went', 'lgbtq', 'support', 'group']
    >>> term_counts("Runs, running, ran.")
    {'run': 2, 'ran': 1}

The same function feeds indexing and queries, on every backend, so ranking is identical
whatever the database; only digests of these terms are stored (``memstack.memory.cipher``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

import snowballstemmer

__all__ = ["STOP_WORDS", "term_counts", "terms"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")

# Function words, filler and the wording of questions ("what kind of", "would … likely"):
# they carry no topic, only cost. Negations ("not", "no") are kept.
_STOP = """a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during each few for
from further had has have having here how i if in into is it its itself just me more most my
myself of off on once only or other our ours out over own same so some such than that the
their theirs them then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself i'm
it's that's what's i've you're i'd i'll let's there's he's she's we're they're oh yeah hey hi
wow really also got get gonna lot lots much thanks thank likely kind think feel describe way
ways type types thing things might say"""
STOP_WORDS = frozenset(_STOP.split())

_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    stem: str = _stemmer.stemWord(word)
    return stem


def terms(text: str) -> list[str]:
    """The text's search terms, in order, repeats kept."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    out: list[str] = []
    for match in _WORD.finditer(folded):
        word = match.group()
        if word in STOP_WORDS:
            continue
        if word.endswith("'s"):
            word = word[:-2]
        word = word.replace("'", "")
        if len(word) > 1 or word.isdigit():
            out.append(_stem(word))
    return out


def term_counts(text: str) -> dict[str, int]:
    """Term frequencies of ``text``."""
    return dict(Counter(terms(text)))
