"""Secrets masked before anything is stored (DESIGN.md section 8, source 001's redaction rules).

Pure: plain data in, plain data out. Masks, anywhere in a payload: token-shaped secrets, PEM
blocks, URL passwords, card numbers and base64 credentials (``secret_text``); ``Authorization``
(any scheme) and ``Cookie``/``Set-Cookie`` headers in text; ``key=value`` pairs and the values of
JSON keys named like a secret, also as ``[name, value]`` header lists and ``{"name": ...,
"value": ...}`` objects; JSON documents inside strings, walked like the payload. Truncates raw
planner output previews.
"""

import functools
import json
import re
from typing import Any

from jobs.contract.secret_text import MASK, mask_tokens

__all__ = ["MASK", "contains_secret", "is_secret_key", "redact", "redact_payload", "redact_text"]

SECRET_KEY_NAME = re.compile(
    r"(pass(word|wd)?|pwd|secret|token|api[-_]?key|apikey|access[-_]?key|private[-_]?key"
    r"|authorization|auth[-_]?header|cookie|session[-_]?key|credential|ssh[-_]?key"
    r"|(account|sharedaccess)[-_]?key)",
    re.IGNORECASE,
)
# Keys that are secrets on their own although a rule below would keep them.
SECRET_KEYS = frozenset({"auth", "session", "refresh_tokens", "refresh-tokens", "refreshtokens"})
# A key with "auth" as one of its words (basic_auth, http.auth) holds credentials, unless its
# last word says it only describes them.
AUTH_WORD_DESCRIBES = frozenset(
    {"type", "method", "methods", "scheme", "provider", "mode", "kind", "status", "url", "uri"}
)
# Keys that merely mention a secret-ish word but hold identifiers we must keep readable.
NON_SECRET_KEYS = frozenset({"session_id", "token_name", "max_tokens", "tokens", "token_count"})
# Token *counts* (max_tokens, prompt_tokens, total_tokens, ...) are usage figures, not secrets,
# also as OpenInference nests them (llm.token_count.prompt, llm.token_count.total, ...).
NON_SECRET_SUFFIXES = ("tokens", "token_count")
NON_SECRET_PARTS = ("token_count.", "usage.")
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
KEY_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")

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
# key=value and key: value pairs whose key names a secret, the key maybe quoted (JSON text):
# "Authorization: Bearer x" keeps the scheme word and masks what follows it.
SECRET_PAIR = re.compile(
    r"(?i)\b([\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|authorization|credentials?|cookie|auth|session|(?:account|sharedaccess)key)"
    r"[\w.-]*)(\\?[\"']?\s*[=:]\s*)((?:bearer|basic)\s+|[A-Za-z][\w\-]*\s(?=\[REDACTED\]))?"
    r"(\[REDACTED\]|\\\"(?:[^\"\\]|\\[^\"])*\\\"|\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s&,;\"'}\]]+)"
)
# Words one of which a secret pair's key holds (SECRET_PAIR's alternatives, lowercase).
PAIR_KEYWORDS = (
    *("pass", "pwd", "secret", "token", "key", "authorization", "credential", "cookie"),
    *("auth", "session"),
)
# JSON documents inside a string: at most this many tried per string, and no deeper than this.
MAX_EMBEDDED_DOCUMENTS = 16
MAX_EMBEDDED_DEPTH = 32
_JSON = json.JSONDecoder()


def _mask_pair(match: re.Match[str]) -> str:
    key, separator, scheme, value = match.groups()
    if not is_secret_key(key) or value.strip("\\\"'") == MASK:
        return match.group(0)
    quote = value[:2] if value.startswith("\\") else value[:1] if value[:1] in "\"'" else ""
    return f"{key}{separator}{scheme or ''}{quote}{MASK}{quote}"


def _mask_authorization(match: re.Match[str]) -> str:
    prefix, scheme = match.groups()
    return f"{prefix}{scheme} {MASK}" if scheme else f"{prefix}{MASK}"


def redact_text(value: str) -> str:
    """``value`` with every recognised secret replaced by ``[REDACTED]``."""
    # Short strings (ids, names, codes) repeat across events: remember their answer.
    return _redact_short(value) if len(value) <= CACHED_TEXT_CHARS else _redact_text(value)


def contains_secret(value: str) -> bool:
    """Whether redaction would change ``value`` (for ids, which are refused rather than masked)."""
    return redact_text(value) != value


def _redact_text(value: str) -> str:
    if len(value) < 6:
        return value
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
    return value


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


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    lowered = name.lower()
    if lowered in SECRET_KEYS:
        return True
    if lowered in NON_SECRET_KEYS or lowered.endswith(NON_SECRET_SUFFIXES):
        return lowered.replace("-", "_").endswith("refresh_tokens")
    if any(part in lowered for part in NON_SECRET_PARTS):
        return False
    if SECRET_KEY_NAME.search(name):
        return True
    words = [word.lower() for word in KEY_WORDS.findall(name)]
    return "auth" in words and words[-1] not in AUTH_WORD_DESCRIBES


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets masked at any depth; non-text values are kept as is.
    Callers bound the depth (``events.validate`` refuses deeper payloads)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        named = _named_header_value(value)
        return {
            key: (
                MASK
                if (key == named or is_secret_key(key)) and value[key] not in (None, "")
                else redact(value[key])
            )
            for key in value
        }
    if isinstance(value, list):
        if len(value) == 2 and _is_secret_header(value[0]) and value[1] not in (None, ""):
            return [value[0], MASK]  # a header as [name, value]
        return [redact(item) for item in value]
    return value


def _is_secret_header(name: Any) -> bool:
    """Whether ``name`` is a header or field name (one token, as HTTP writes them) that names a
    secret; free text that merely mentions one is not a name."""
    return isinstance(name, str) and bool(HEADER_NAME.fullmatch(name)) and is_secret_key(name)


def _named_header_value(item: dict[str, Any]) -> str | None:
    """The key holding the value of a header given as {"name": "Cookie", "value": "..."}."""
    name = item.get("name", item.get("key"))
    if "value" in item and _is_secret_header(name):
        return "value"
    return None


def redact_payload(payload: dict[str, Any], preview_chars: int) -> dict[str, Any]:
    """The payload as it may be stored: secrets masked, ``raw_output_preview`` truncated."""
    cleaned = redact(payload)
    preview = cleaned.get("raw_output_preview")
    if isinstance(preview, str) and len(preview) > preview_chars:
        cleaned["raw_output_preview"] = (
            preview[:preview_chars] + f"… [truncated {len(preview) - preview_chars} characters]"
        )
    return cleaned
