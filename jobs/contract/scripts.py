"""Which scripts an id's letters are written in. Pure.

An id that mixes scripts (a Cyrillic a, U+0430, among Latin letters) may be a look-alike of another
id: it is accepted, as any id that breaks nothing is, and pages mark it. A letter's script is
read off its Unicode name (``LATIN SMALL LETTER A``, ``CYRILLIC SMALL LETTER A``); scripts
written together (Han, Hiragana and Katakana in Japanese, Hangul with Han) count as one, and
digits, punctuation and symbols as none.
"""

import functools
import unicodedata

# Name prefixes that say how a letter is drawn, not its script: the script is the next word.
FORM_WORDS = frozenset({"FULLWIDTH", "HALFWIDTH"})
# Scripts that one writing system mixes.
SCRIPT_GROUPS = {
    "CJK": "Han",
    "HIRAGANA": "Han",
    "KATAKANA": "Han",
    "HANGUL": "Han",
    "BOPOMOFO": "Han",
    "IDEOGRAPHIC": "Han",
}


def _script(char: str) -> str | None:
    if not unicodedata.category(char).startswith("L"):
        return None
    words = unicodedata.name(char, "").replace("-", " ").split()
    while words and words[0] in FORM_WORDS:
        words = words[1:]
    if not words:
        return None
    return SCRIPT_GROUPS.get(words[0], words[0].title())


@functools.lru_cache(maxsize=4096)
def mixed_scripts(value: str) -> tuple[str, ...]:
    """The scripts of ``value``'s letters, sorted, when there are two or more; else ()."""
    if value.isascii():
        return ()
    scripts = {script for char in value if (script := _script(char))}
    return tuple(sorted(scripts)) if len(scripts) > 1 else ()
