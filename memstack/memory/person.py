"""A user's first-person words restated in the third person, for memories about them.

    >>> from memstack.memory.person import third_person
    >>> third_person("I'm vegetarian")
    'The user is vegetarian'
    >>> third_person("my dog is called Rex and I walk him daily")
    "The user's dog is called Rex and the user walks him daily"

A memory is read later by a model as part of its instructions: "I'm vegetarian" there
reads as the model speaking about itself. The rule extractor (``memstack.memory.distill``)
keeps the user's own words for "remember that …" and corrections, so they are restated
here; the other rules already write "The user …". Pure and rule-based: pronouns, the
verb after "I" (``I walk`` → ``the user walks``), nothing else.
"""

from __future__ import annotations

import re

__all__ = ["third_person"]

# Verb forms that stay as they are after "the user": modals and past tenses.
_KEPT = """can can't cannot could couldn't will won't would wouldn't shall should shouldn't may
    might must mustn't did didn't was wasn't had went got made bought saw took came gave found
    left met ran said told thought knew felt kept lost paid sold sent spent won wrote ate drove
    flew grew began broke chose forgot became built caught taught brought fell hurt put quit set
    let read cut hit held heard understood stood sat slept swam sang meant dealt dreamt learnt
    burnt spelt lent bent lit shot fought sought threw drew wore tore rode rose spoke woke froze
    stole hid bit shook hung rang sank struck stuck swore swung dug spun slid fled forgave"""
_UNCHANGED = frozenset(_KEPT.split())
# Present tenses that end like a past one ("I need" is not "I walked").
_PRESENT_ED = frozenset(
    {"need", "feed", "bleed", "breed", "speed", "succeed", "proceed", "exceed", "heed", "embed"}
    | {"seed", "weed", "shred"}
)
# Words after "I" that are not its verb: "I and Ana love Rome".
_NOT_VERBS = frozenset({"and", "or", "nor", "but"})
_IRREGULAR = {
    "am": "is",
    "'m": "is",
    "have": "has",
    "'ve": "has",
    "do": "does",
    "don't": "doesn't",
    "go": "goes",
    "'d": "would",
    "'ll": "will",
    "were": "was",
    "weren't": "wasn't",
}
_ADVERB = r"(?:really|also|always|never|usually|often|just|still|only|now|sometimes|mostly)"
_I = re.compile(
    rf"\b[Ii]\b(?P<contracted>['’](?:m|ve|d|ll)\b)?(?P<adverb>\s+{_ADVERB})?"
    rf"(?(contracted)|(?:\s+(?P<verb>[A-Za-z][\w'’]*))?)",
)
_POSSESSIVE = re.compile(r"\b(?:my|mine)\b", re.IGNORECASE)
_MYSELF = re.compile(r"\bmyself\b", re.IGNORECASE)
_ME = re.compile(r"\bme\b", re.IGNORECASE)


def _verb(word: str) -> str:
    """``word`` agreeing with a third-person subject (``walk`` → ``walks``)."""
    lower = word.lower().replace("’", "'")
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower in _UNCHANGED or (lower.endswith("ed") and lower not in _PRESENT_ED) or "'" in lower:
        return word
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return word + "es"
    if len(lower) > 1 and lower.endswith("y") and lower[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _subject(match: re.Match[str]) -> str:
    adverb = match["adverb"] or ""
    if match["contracted"]:  # "I'm really tired": the verb comes before the adverb
        contracted = match["contracted"].lower().replace("’", "'")
        return f"the user {_IRREGULAR[contracted]}{adverb}"
    verb = match["verb"]
    if verb and verb.lower() in _NOT_VERBS:
        return f"the user{adverb} {verb}"
    return f"the user{adverb}" + (f" {_verb(verb)}" if verb else "")


def third_person(text: str, *, capitalise: bool = True) -> str:
    """``text`` with the user's "I", "me", "my" restated as "the user" (capitalised first)."""
    out = _I.sub(_subject, text)
    out = _POSSESSIVE.sub("the user's", out)
    out = _MYSELF.sub("themselves", out)
    out = _ME.sub("the user", out)
    return out[:1].upper() + out[1:] if capitalise else out
