"""Secrets masked before anything is stored, and where (docs/contract.md, "Redaction").

Pure: plain data in, plain data out. Masks, anywhere in a payload: token-shaped secrets, PEM
blocks, URL passwords, card numbers and base64 credentials (``secret_text``); ``Authorization``
(any scheme) and ``Cookie``/``Set-Cookie`` headers in text; ``key=value`` pairs and the values of
JSON keys that name a secret (``is_secret_key``), also as ``[name, value]`` header lists and
``{"name": ..., "value": ...}`` objects; JSON keys that are themselves a secret; JSON documents
inside strings, walked like the payload. Values under keys that name an id are ids: masked only
for a credential format (``names_an_id``). ``redacted`` says which paths it masked (never what
was there). ``redact_payload`` then bounds long text, so a secret that straddles a cut is masked
whole.
"""

import enum
import functools
import json
import re
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from jobs.contract.events import bounded_long_text
from jobs.contract.secret_text import MASK, is_card_number, mask_formats, mask_tokens

__all__ = [
    "MASK",
    "Redacted",
    "bounded_paths",
    "bounded_payload",
    "is_secret_key",
    "key_words",
    "names_an_id",
    "redact",
    "redact_into",
    "redact_payload",
    "redact_text",
    "redacted",
]


class Word(enum.Flag):
    """What a word of a key name says about the key's value."""

    NONE = 0
    # The noun a key is about when it is the key's last word: the value is a secret.
    SECRET = enum.auto()
    # Makes a following key, keys or tokens a secret (api_key, refresh_tokens).
    QUALIFIER = enum.auto()
    # key, keys, tokens: a secret only right after a qualifier (max_tokens, sort_key are not).
    QUALIFIED = enum.auto()
    # A secret when it is the whole key: a bare "session" holds a session's secret (the
    # cookie Flask, Rack and Express sign), "session_id" or "user_session" name one.
    ALONE = enum.auto()
    # The key's value is an id when this is its last word (order_id, requestId, user.ids):
    # masked only for a credential format, as ids are refused only for one.
    ID = enum.auto()
    # Right before a last word "token": a kind of token that is text, not a credential (a
    # tokenizer's bos_token, a pager's next_page_token).
    TEXT = enum.auto()


# The one table of words (lowercase) that decides whether a key names a secret.
KEY_WORDS: dict[str, Word] = {
    "password": Word.SECRET,
    "passwords": Word.SECRET,
    "passwd": Word.SECRET,
    "pwd": Word.SECRET,
    "passphrase": Word.SECRET,
    "secret": Word.SECRET | Word.QUALIFIER,
    "secrets": Word.SECRET,
    "token": Word.SECRET,
    "auth": Word.SECRET | Word.QUALIFIER,
    "authorization": Word.SECRET,
    "credential": Word.SECRET,
    "credentials": Word.SECRET,
    "cookie": Word.SECRET,
    "cookies": Word.SECRET,
    "key": Word.QUALIFIED,
    "keys": Word.QUALIFIED,
    "tokens": Word.QUALIFIED,
    "api": Word.QUALIFIER,
    "access": Word.QUALIFIER,
    "private": Word.QUALIFIER,
    "refresh": Word.QUALIFIER,
    "session": Word.QUALIFIER | Word.ALONE,
    "ssh": Word.QUALIFIER,
    "signing": Word.QUALIFIER,
    "encryption": Word.QUALIFIER,
    "client": Word.QUALIFIER,
    "bearer": Word.QUALIFIER,
    "id": Word.QUALIFIER | Word.ID,
    "ids": Word.ID,
    "uuid": Word.ID,
    "guid": Word.ID,
    **dict.fromkeys(("bos", "eos", "pad", "unk", "sep", "cls", "mask", "page"), Word.TEXT),
}
# Compounds written as one word (apikey, X-AUTHTOKEN, csrftoken): read as their words.
RUN_TOGETHER: dict[str, tuple[str, ...]] = {
    "apikey": ("api", "key"),
    "apikeys": ("api", "keys"),
    "accesskey": ("access", "key"),
    "secretkey": ("secret", "key"),
    "privatekey": ("private", "key"),
    "sessionkey": ("session", "key"),
    "sshkey": ("ssh", "key"),
    "signingkey": ("signing", "key"),
    "authkey": ("auth", "key"),
    "authtoken": ("auth", "token"),
    "accesstoken": ("access", "token"),
    "refreshtoken": ("refresh", "token"),
    "idtoken": ("id", "token"),
    "sessiontoken": ("session", "token"),
    "bearertoken": ("bearer", "token"),
    "csrftoken": ("csrf", "token"),
    "xsrftoken": ("xsrf", "token"),
    "clientsecret": ("client", "secret"),
    "secretaccesskey": ("secret", "access", "key"),
    "setcookie": ("set", "cookie"),
}
# A key's words: runs of capitals (API in APIKey), capitalised or lowercase words, digits.
KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# A single word ending with one of these nouns is a compound of it (PGPASSWORD, dbpassword).
# Not token (tiktoken is a tokenizer), auth or authorization (a payment's "preauthorization"
# is an ordinary record) nor pwd (the shell's OLDPWD is a directory).
COMPOUND_ENDINGS = (
    *("passwords", "password", "passwd", "passphrase", "secrets", "secret"),
    *("credentials", "credential", "cookies", "cookie"),
)

HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")

# An Authorization header (any scheme: Bearer, Basic, Token, Digest, AWS4-HMAC-SHA256, ...):
# the scheme word kept, everything after it masked to the end of the line.
AUTHORIZATION_KEY = r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*"
SCHEME_WORD = r"(?:([A-Za-z][\w\-]*) (?=\S))?"
AUTHORIZATION_QUOTED = re.compile(AUTHORIZATION_KEY + r"[\"'])" + SCHEME_WORD + r"[^\r\n\"']+")
AUTHORIZATION_LINE = re.compile(AUTHORIZATION_KEY + r")(?![\"'])" + SCHEME_WORD + r"[^\r\n]+")
SECRET_PATTERNS: list[tuple[re.Pattern[str], str, tuple[str, ...]]] = [
    # Cookie / Set-Cookie headers: every cookie, to the end of the line.
    (
        re.compile(r"(?i)\b((?:set-)?cookie[\"']?\s*[:=]\s*[\"'])[^\r\n\"']+"),
        r"\1" + MASK,
        ("cookie",),
    ),
    (
        re.compile(r"(?i)\b((?:set-)?cookie[\"']?\s*[:=]\s*)(?![\"'])[^\r\n]+"),
        r"\1" + MASK,
        ("cookie",),
    ),
    # Bearer <token> / Basic <credentials> anywhere. A short letters-only word is prose
    # ("basic information"), not a credential.
    (
        re.compile(r"(?i)\b(bearer|basic)\s+(?![A-Za-z]{1,19}\b)[A-Za-z0-9\-._~+/]{6,}=*"),
        r"\1 " + MASK,
        ("bearer", "basic"),
    ),
]
# Secrets known by what stands before them in a command line, a query string or a document:
# the group ``secret`` is masked. Each runs only on text holding one of its needles.
CONTEXT_PATTERNS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(pattern), needles)
    for pattern, needles in (
        # The MySQL and MariaDB clients' -p<password>, written against the flag.
        (
            r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mariadb)\b[^\r\n]*?"
            r"\s-p(?P<secret>[^\s'\"]+)",
            ("mysql", "mariadb"),
        ),
        # curl's and wget's -u / --user user:password.
        (r"(?:^|\s)(?:-u\s*|--user[\s=]+)[^\s:'\"]+:(?P<secret>[^\s'\"]+)", ("-u", "--user")),
        # sshpass -p, redis-cli -a, docker login -p, mongo -p, sqlcmd/bcp -P, ldapsearch -w.
        (r"\bsshpass\b[^\r\n]*?\s-p\s*(?P<secret>[^\s'\"]+)", ("sshpass",)),
        (r"\bredis-cli\b[^\r\n]*?\s-a\s+(?P<secret>[^\s'\"]+)", ("redis-cli",)),
        (r"\bdocker\s+login\b[^\r\n]*?\s-p\s+(?P<secret>[^\s'\"]+)", ("docker",)),
        (
            r"\bmongo(?:sh|dump|restore|import|export)?\b[^\r\n]*?\s-p\s+(?P<secret>[^\s'\"-]\S*)",
            ("mongo",),
        ),
        (
            r"\b(?:sqlcmd|bcp|osql|isql)\b[^\r\n]*?\s-P\s*(?P<secret>[^\s'\"]+)",
            ("sqlcmd", "bcp", "sql"),
        ),
        (r"\bldap\w*\b[^\r\n]*?\s-w\s+(?P<secret>[^\s'\"]+)", ("ldap",)),
        # smbclient -U user%password; htpasswd -b file user password.
        (
            r"\b(?:smbclient|rpcclient|smbmap)\b[^\r\n]*?-U\s*[^\s%]+%(?P<secret>[^\s'\"]+)",
            ("smb", "rpcclient"),
        ),
        (r"\bhtpasswd\s+-\w*b\w*\s+\S+\s+\S+\s+(?P<secret>[^\s'\"]+)", ("htpasswd",)),
        # OpenSSL's -passin/-passout/-pass pass:<password>.
        (r"(?i)\bpass:(?P<secret>[^\s'\"]+)", ("pass:",)),
        # A .netrc line: machine <host> login <user> password <password>.
        (r"(?i)\blogin\s+\S+\s+password\s+(?P<secret>[^\s'\"]+)", ("password",)),
        # Query parameters that carry a key or a signature (Google's ?key=, signed URLs).
        (
            r"(?i)[?&;](?:key|sig|signature|x-amz-signature|x-goog-signature|x-amz-credential"
            r"|x-goog-credential|code_verifier)=(?P<secret>[^&#\s\"'<>]+)",
            ("key=", "sig", "signature=", "credential=", "code_verifier="),
        ),
    )
]
# A command line's --flag value (or --flag=value) whose flag names a secret (``is_secret_key``:
# --password, --token, --api-key, --client-secret; not --password-file nor --no-password).
SECRET_FLAG = re.compile(
    r"(?i)(?:^|\s)--(?P<flag>[a-z][\w-]{0,63})(?:=|\s+)(?P<secret>\"[^\"]*\"|'[^']*'|(?!-)[^\s'\"]+)"
)
# An XML element whose name names a secret: <password>...</password>, <ns:clientSecret>.
SECRET_ELEMENT = re.compile(r"<(?P<flag>[\w.:-]{1,64})(?:\s[^<>]*)?>(?P<secret>[^<]+)</(?P=flag)>")
# A word holding URL escapes (%3A, %20...): decoded, it is redacted as text is.
MAX_PERCENT_DECODINGS = 3
PERCENT_WORD = re.compile(r"(?<![^\s\"'<>])[^\s\"'<>]*%[0-9A-Fa-f]{2}[^\s\"'<>]*")
# Substrings one of which every key naming a secret holds (lowercase): text without any has no
# secret pair to look for.
PAIR_KEYWORDS = ("pass", "pwd", "secret", "token", "auth", "credential", "cookie", "key", "session")
# key=value and key: value pairs, the key maybe quoted (JSON text), whose key holds one of
# PAIR_KEYWORDS; ``is_secret_key`` decides whether it names a secret. "Authorization: Bearer x"
# keeps the scheme word and masks what follows it. "::" is a path's separator and "==" a
# comparison, not a pair's (tests/test_login.py::TestAuth::test_password, tiktoken==0.8.0).
SECRET_PAIR = re.compile(
    r"(?i)\b([\w.-]*(?:" + "|".join(PAIR_KEYWORDS) + r")[\w.-]*)"
    r"(\\?[\"']?\s*(?:=(?!=)|:(?!:))\s*)((?:bearer|basic)\s+|[A-Za-z][\w\-]*\s(?=\[REDACTED\]))?"
    r"(\[REDACTED\]|\\\"(?:[^\"\\]|\\[^\"])*\\\"|\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s&,;\"'}\]]+)"
)
# JSON documents inside a string: at most this many tried per string, and no deeper than this.
MAX_EMBEDDED_DOCUMENTS = 16
MAX_EMBEDDED_DEPTH = 32
# Bounds of what an event records of its masked paths: a payload of ten thousand passwords
# records the first ones and how many more.
MAX_MASKED_PATHS = 100
MAX_PATH_CHARS = 200
_JSON = json.JSONDecoder()


class Redacted(NamedTuple):
    """A value with its secrets masked, and the paths masked in it (``payload_results.password``,
    ``headers[1]``, ``reason``), in the order met; never what was there."""

    value: Any
    masked: tuple[str, ...]


# --- key names ----------------------------------------------------------------------------


def key_words(name: str) -> list[str]:
    """The words of a key name, lowercase: split at ``_``, ``-``, ``.``, spaces, camelCase and
    digits (numbers are dropped: ``password2`` is about a password), run-together compounds
    read as their words."""
    words: list[str] = []
    for word in KEY_WORD.findall(name):
        if word.isdigit():
            continue
        lowered = word.lower()
        words.extend(RUN_TOGETHER.get(lowered) or _compound(lowered))
    return words


def _compound(word: str) -> tuple[str, ...]:
    if word not in KEY_WORDS:
        for ending in COMPOUND_ENDINGS:
            if word.endswith(ending) and len(word) > len(ending):
                return (word[: -len(ending)], ending)
    return (word,)


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """Whether a key (a JSON key, a header name, the key of a ``key=value`` pair) names a
    secret: its last word is a secret noun (``db_password``, ``clientSecret``, ``X-Auth-Token``;
    not a token of text, ``bos_token``), or is key, keys or tokens qualified as a secret by the
    word before it (``api_key``, ``AWS_SECRET_ACCESS_KEY``, ``refresh_tokens``), or it is only
    a word that is a secret alone (``session``). Never when a secret word qualifies another noun
    (``password_reset_sent``, ``token_count``) nor for a word that merely holds those letters
    (``tokenizer``, ``bypass``)."""
    words = key_words(name)
    if not words:
        return False
    last = KEY_WORDS.get(words[-1], Word.NONE)
    before = KEY_WORDS.get(words[-2], Word.NONE) if len(words) > 1 else Word.NONE
    if Word.SECRET in last:
        return not (words[-1] == "token" and Word.TEXT in before)
    if Word.ALONE in last and len(words) == 1:
        return True
    return Word.QUALIFIED in last and Word.QUALIFIER in before


@functools.lru_cache(maxsize=4096)
def names_an_id(name: str) -> bool:
    """Whether a key's value is an id: its last word is id, ids, uuid or guid (``order_id``,
    ``requestId``, ``session.id``). An id is masked only for a credential format
    (``secret_text.mask_formats``): digits that pass the Luhn check or a base64 word are ids."""
    words = key_words(name)
    return bool(words) and Word.ID in KEY_WORDS.get(words[-1], Word.NONE)


# --- text ---------------------------------------------------------------------------------


def _mask_pair(match: re.Match[str]) -> str:
    key, separator, scheme, value = match.groups()
    if not is_secret_key(key) or value.strip("\\\"'") == MASK:
        return match.group(0)
    quote = value[:2] if value.startswith("\\") else value[:1] if value[:1] in "\"'" else ""
    return f"{key}{separator}{scheme or ''}{quote}{MASK}{quote}"


def _mask_authorization(match: re.Match[str]) -> str:
    prefix, scheme = match.groups()
    return f"{prefix}{scheme} {MASK}" if scheme else f"{prefix}{MASK}"


# Text no rule looks at: shorter than this (the shortest secret worth masking), or one word of
# letters, digits, '_', '.' and '-' shorter than a base64 word (12), a card number (13 digits)
# or a token (16): every other rule wants a space or one of : = % < { [ / @ ? & ; in the text.
SHORTEST_SECRET_CHARS = 6
PLAIN_WORD = re.compile(r"[A-Za-z0-9_.\-]{1,11}")


def cannot_hold_secret(value: str) -> bool:
    """Whether no rule of ``redact_text`` can mask anything in ``value`` (a test holds it to
    every rule): redaction skips it."""
    return len(value) < SHORTEST_SECRET_CHARS or (
        len(value) <= 11 and PLAIN_WORD.fullmatch(value) is not None
    )


def redact_text(value: str) -> str:
    """``value`` with every recognised secret replaced by ``[REDACTED]``."""
    if len(value) < SHORTEST_SECRET_CHARS:
        return value
    # Short strings (ids, names, codes, keys) repeat across events: remember their answer.
    return _redact_short(value) if len(value) <= CACHED_TEXT_CHARS else _redact_text(value)


def _redact_text(value: str, percent_words: bool = True) -> str:
    """``value`` redacted; ``percent_words``: URL-encoded words are decoded and redacted too
    (False for the decoded text itself)."""
    if cannot_hold_secret(value):
        return value
    return _apply_rules(value, percent_words)


def _apply_rules(value: str, percent_words: bool) -> str:
    """``value`` with every rule applied."""
    if "{" in value or "[" in value:
        value = _redact_embedded_json(value)
    value = mask_tokens(value)
    # Each pattern runs only on text holding its keyword: substring tests are cheap, scans not.
    lowered = value.lower()
    if "authorization" in lowered:
        value = AUTHORIZATION_QUOTED.sub(_mask_authorization, value)
        value = AUTHORIZATION_LINE.sub(_mask_authorization, value)
    for pattern, replacement, needles in SECRET_PATTERNS:
        if any(needle in lowered for needle in needles):
            value = pattern.sub(replacement, value)
    if ("=" in value or ":" in value) and any(word in lowered for word in PAIR_KEYWORDS):
        value = SECRET_PAIR.sub(_mask_pair, value)
    for pattern, needles in CONTEXT_PATTERNS:
        if any(needle in lowered for needle in needles):
            value = pattern.sub(_mask_secret_group, value)
    if "--" in value:
        value = SECRET_FLAG.sub(_mask_named_secret, value)
    if "</" in value:
        value = SECRET_ELEMENT.sub(_mask_named_secret, value)
    if percent_words and "%" in value:
        value = PERCENT_WORD.sub(_mask_percent_word, value)
    return value


def _mask_secret_group(match: re.Match[str]) -> str:
    start, end = match.span("secret")
    if match.group("secret") == MASK:
        return match.group(0)
    whole = match.group(0)
    offset = match.start()
    return whole[: start - offset] + MASK + whole[end - offset :]


def _mask_named_secret(match: re.Match[str]) -> str:
    flag = match.group("flag").rsplit(":", 1)[-1]
    if flag.lower().startswith("no-") or not (is_secret_key(flag) or flag.lower() == "pass"):
        return match.group(0)
    return _mask_secret_group(match)


def _mask_percent_word(match: re.Match[str]) -> str:
    """A URL-encoded word whose decoded text holds a secret: that text redacted, encoded again
    (the mask kept readable); any other word as it is."""
    word = decoded = match.group(0)
    for _level in range(MAX_PERCENT_DECODINGS):
        once = unquote(decoded)
        if once == decoded:
            break
        decoded = once
    if decoded == word:
        return word
    cleaned = _redact_text(decoded, percent_words=False)
    return word if cleaned == decoded else quote(cleaned, safe="[]")


def _redact_embedded_json(value: str) -> str:
    """JSON objects and arrays inside ``value`` redacted as payloads are (header lists and keys
    named like secrets included), written back compactly when something was masked."""
    pieces, position, tries = [], 0, 0
    for opening in re.finditer(r"[{\[]", value):
        start = opening.start()
        if start < position:
            continue
        tries += 1
        if tries > MAX_EMBEDDED_DOCUMENTS:
            break
        try:
            document, end = _JSON.raw_decode(value, start)
        except (ValueError, RecursionError):
            continue
        if (
            not isinstance(document, dict | list)
            or not document
            or _depth(document) > (MAX_EMBEDDED_DEPTH)
        ):
            continue
        cleaned = redact(document)
        if cleaned != document:
            pieces += [value[position:start], json.dumps(cleaned, ensure_ascii=False)]
            position = end
    if not pieces:
        return value
    return "".join(pieces) + value[position:]


def _depth(document: Any) -> int:
    deepest, stack = 0, [(document, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_EMBEDDED_DEPTH:
            return depth
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


CACHED_TEXT_CHARS = 200
_redact_short = functools.lru_cache(maxsize=8192)(_redact_text)


# --- values -------------------------------------------------------------------------------


def redacted(value: Any, path: str = "") -> Redacted:
    """``value`` with secrets masked at any depth (non-text values kept as they are), and the
    paths it masked, under ``path``. Callers bound the depth (``events.validate`` refuses
    deeper payloads)."""
    masked: list[str] = []
    cleaned = redact_into(value, path, masked)
    return Redacted(cleaned, bounded_paths(masked) if masked else ())


def redact(value: Any) -> Any:
    """``redacted(value).value``: the copy alone."""
    return redact_into(value, "", [])


def redact_into(value: Any, path: str, masked: list[str]) -> Any:
    """``value`` redacted (``value`` itself at ``path``), the paths masked in it appended to
    ``masked`` as they are met (``bounded_paths`` bounds them)."""
    if isinstance(value, str):
        cleaned = redact_text(value)
        if cleaned != value:
            masked.append(path)
        return cleaned
    if isinstance(value, dict):
        return _redact_object(value, path, masked)
    if isinstance(value, list):
        return _redact_array(value, path, masked)
    return value


# What a key's value is (``_key_reading``).
PLAIN, SECRET, ID = 0, 1, 2


@functools.lru_cache(maxsize=8192)
def _key_reading(key: str) -> tuple[str, int]:
    """A key as it is stored (masked when it is itself a secret) and what its value is:
    SECRET (``is_secret_key``), ID (``names_an_id``) or PLAIN. Keys repeat across events: one
    remembered answer each."""
    kind = SECRET if is_secret_key(key) else ID if names_an_id(key) else PLAIN
    return redact_text(key), kind


def _redact_object(item: dict[str, Any], path: str, masked: list[str]) -> dict[str, Any]:
    named = _named_header_value(item)
    cleaned: dict[str, Any] = {}
    for key, value in item.items():
        name, kind = _key_reading(key) if isinstance(key, str) else (key, PLAIN)
        if kind == PLAIN and name == key and key != named and _cannot_hold_secret(value):
            cleaned[key] = value
            continue
        if name != key:
            # A key that is itself a secret: masked, kept apart from the object's other keys.
            name = _distinct_key(name, item, cleaned)
            masked.append(_child(path, name))
        if (kind == SECRET or key == named) and _holds_secret(value):
            cleaned[name] = MASK
            masked.append(_child(path, name))
        elif isinstance(value, str):
            # Most values are text: the path is written only when something was masked.
            text = _mask_id(value) if kind == ID else redact_text(value)
            if text != value:
                masked.append(_child(path, name))
            cleaned[name] = text
        elif kind != ID and _is_card(value):
            cleaned[name] = MASK
            masked.append(_child(path, name))
        elif isinstance(value, dict | list):
            child = _child(path, name)
            cleaned[name] = (
                _redact_id(value, child, masked)
                if kind == ID and isinstance(value, list)
                else redact_into(value, child, masked)
            )
        else:
            cleaned[name] = value
    return cleaned


def _redact_array(items: list[Any], path: str, masked: list[str]) -> list[Any]:
    if len(items) == 2 and _is_secret_header(items[0]) and _holds_secret(items[1]):
        masked.append(path)
        return [items[0], MASK]  # a header as [name, value]
    cleaned = []
    for index, item in enumerate(items):
        if isinstance(item, str | dict | list):
            cleaned.append(redact_into(item, f"{path}[{index}]", masked))
        elif _is_card(item):
            cleaned.append(MASK)
            masked.append(f"{path}[{index}]")
        else:
            cleaned.append(item)
    return cleaned


def _cannot_hold_secret(value: Any) -> bool:
    """Whether a value under a plain key (one that names no secret and no id) needs no look:
    true, false, null, a float, an integer too short or long for a card number, text no rule
    looks at (``cannot_hold_secret``)."""
    kind = type(value)
    if kind is str:
        return cannot_hold_secret(value)
    if kind is int:
        return not 10**12 <= value < 10**19
    return kind is bool or kind is float or value is None


def _is_card(value: Any) -> bool:
    """A JSON number that is a card number (``secret_text.is_card_number``)."""
    return type(value) is int and is_card_number(value)


def _redact_id(value: str | list, path: str, masked: list[str]) -> Any:
    """An id (or a list of them) with credential formats masked and nothing else."""
    if isinstance(value, list):
        return [
            _redact_id(item, f"{path}[{index}]", masked)
            if isinstance(item, str | list)
            else redact_into(item, f"{path}[{index}]", masked)
            for index, item in enumerate(value)
        ]
    cleaned = _mask_id(value)
    if cleaned != value:
        masked.append(path)
    return cleaned


def _mask_id(value: str) -> str:
    """An id with its credential formats masked (``secret_text.mask_formats``)."""
    return _mask_short_id(value) if len(value) <= CACHED_TEXT_CHARS else mask_formats(value)


_mask_short_id = functools.lru_cache(maxsize=8192)(mask_formats)


def _holds_secret(value: Any) -> bool:
    """Whether the value of a key naming a secret is masked: not when empty, true or false,
    or masked already."""
    return value not in (None, "", MASK) and not isinstance(value, bool)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _distinct_key(name: str, item: dict[str, Any], cleaned: dict[str, Any]) -> str:
    """``name``, or ``name 2``, ``name 3``... the first that is no key of ``item`` nor taken."""
    candidate, number = name, 1
    while candidate in item or candidate in cleaned:
        number += 1
        candidate = f"{name} {number}"
    return candidate


def _is_secret_header(name: Any) -> bool:
    """Whether ``name`` is a header or field name (one token, as HTTP writes them) that names a
    secret; free text that merely mentions one is not a name."""
    return isinstance(name, str) and bool(HEADER_NAME.fullmatch(name)) and is_secret_key(name)


def _named_header_value(item: dict[str, Any]) -> str | None:
    """The key holding the value of a header given as {"name": "Cookie", "value": "..."}."""
    if "value" not in item:
        return None
    name = item.get("name", item.get("key"))
    if _is_secret_header(name):
        return "value"
    return None


def bounded_paths(paths: list[str]) -> tuple[str, ...]:
    """``paths`` without repeats, each at most ``MAX_PATH_CHARS`` characters, at most
    ``MAX_MASKED_PATHS`` of them (the last one then says how many more)."""
    unique = [
        path if len(path) <= MAX_PATH_CHARS else path[: MAX_PATH_CHARS - 1] + "…"
        for path in dict.fromkeys(paths)
    ]
    if len(unique) > MAX_MASKED_PATHS:
        more = len(unique) - MAX_MASKED_PATHS + 1
        unique = [*unique[: MAX_MASKED_PATHS - 1], f"… and {more} more"]
    return tuple(unique)


def redact_payload(payload: dict[str, Any], preview_chars: int) -> Redacted:
    """The payload as it may be stored, and the paths masked in it: secrets masked, then bounded
    (``bounded_payload``), so a secret that straddles a cut is masked whole."""
    cleaned, masked = redacted(payload)
    return Redacted(bounded_payload(cleaned, preview_chars), masked)


def bounded_payload(payload: dict[str, Any], preview_chars: int) -> dict[str, Any]:
    """A redacted payload with its long text cut (``events.bounded_long_text``) and
    ``raw_output_preview`` truncated to ``preview_chars``."""
    bounded = bounded_long_text(payload)
    preview = bounded.get("raw_output_preview")
    if isinstance(preview, str) and len(preview) > preview_chars:
        cut = preview[:preview_chars] + f"… [truncated {len(preview) - preview_chars} characters]"
        bounded = {**bounded, "raw_output_preview": cut}
    return bounded
