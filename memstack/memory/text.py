"""Search terms of a text: words, lower-cased, stop words dropped, Snowball-stemmed.

    >>> from memstack.memory.text import query_term_counts, terms, term_counts
    >>> terms("Caroline went to the LGBTQ support groups")
    ['carolin', 'went', 'lgbtq', 'support', 'group']
    >>> term_counts("Runs, running, ran.")
    {'run': 2, 'ran': 1}
    >>> terms("Zoë met José"), terms("zoe met jose")
    (['zoe', 'met', 'jose'], ['zoe', 'met', 'jose'])
    >>> query_term_counts("Zoë")  # and the form earlier releases indexed
    {'zoe': 1, 'zoë': 1}

The same function feeds indexing and queries, on every backend, so ranking is identical
whatever the database; only digests of these terms are stored (``memstack.memory.cipher``).
Accents are folded (``Zoë`` and ``zoe`` are one term), since users type names without
them; only Latin diacritics are dropped, so other scripts keep their marks.
``query_term_counts`` also asks for a word's unfolded form, under which earlier releases
indexed it, so memories stored before folding are still found by the accented word.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

import snowballstemmer

__all__ = ["STOP_WORDS", "fold", "query_term_counts", "term_counts", "terms"]

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
# Latin letters with no decomposition into a base letter and a mark.
_LETTERS = str.maketrans({"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th"})


@lru_cache(maxsize=65_536)
def fold(word: str) -> str:
    """``word`` (case-folded) without Latin diacritics: ``zoë`` → ``zoe``, ``łódź`` → ``lodz``."""
    if word.isascii():
        return word
    bare = "".join(
        char
        for char in unicodedata.normalize("NFD", word)
        if not "\u0300" <= char <= "\u036f"  # Combining Diacritical Marks (Latin accents)
    )
    return unicodedata.normalize("NFC", bare).translate(_LETTERS)


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    stem: str = _stemmer.stemWord(word)
    return stem


def _words(text: str) -> list[str]:
    """Case-folded words of ``text`` that can be terms, before accent folding and stemming."""
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
            out.append(word)
    return out


def terms(text: str) -> list[str]:
    """The text's search terms, in order, repeats kept."""
    return [_stem(fold(word)) for word in _words(text)]


def term_counts(text: str) -> dict[str, int]:
    """Term frequencies of ``text``."""
    return dict(Counter(terms(text)))


def query_term_counts(query: str) -> dict[str, int]:
    """``term_counts`` of a query, plus the unfolded term of each accented word in it."""
    counts = Counter(terms(query))
    for word in _words(query):
        if fold(word) != word:
            counts[_stem(word)] += 1
    return dict(counts)
