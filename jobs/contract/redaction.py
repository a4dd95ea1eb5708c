"""Secrets masked before anything is stored (DESIGN.md section 8, source 001's redaction rules).

Pure: plain data in, plain data out. Masks bearer tokens, API keys, JWTs, passwords in URLs,
``key=value`` pairs and the values of JSON keys named like a secret, anywhere in a payload, and
truncates raw planner output previews.
"""

import functools
import re
from typing import Any

MASK = "[REDACTED]"

SECRET_KEY_NAME = re.compile(
    r"(pass(word|wd)?|pwd|secret|token|api[-_]?key|apikey|access[-_]?key|private[-_]?key"
    r"|authorization|auth[-_]?header|cookie|session[-_]?key|credential)",
    re.IGNORECASE,
)
# Keys that merely mention a secret-ish word but hold identifiers we must keep readable.
NON_SECRET_KEYS = frozenset({"session_id", "token_name", "max_tokens", "tokens", "token_count"})
# Token *counts* (max_tokens, prompt_tokens, total_tokens, ...) are usage figures, not secrets,
# also as OpenInference nests them (llm.token_count.prompt, llm.token_count.total, ...).
NON_SECRET_SUFFIXES = ("tokens", "token_count")
NON_SECRET_PARTS = ("token_count.", "usage.")

SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer <token> / Basic <credentials>. A short letters-only word is prose
    # ("basic information"), not a credential.
    (
        re.compile(r"(?i)\b(bearer|basic)\s+(?![A-Za-z]{1,19}\b)[A-Za-z0-9\-._~+/]{8,}=*"),
        r"\1 " + MASK,
    ),
    # JSON Web Tokens: three base64url segments, the first two starting with '{"' encoded.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    # Provider API keys: sk-..., sk-proj-..., sk-ant-..., rk-..., GitHub and Slack tokens.
    (re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9][A-Za-z0-9_\-]{15,}"), MASK),
    (re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),
    # AWS access key ids.
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    # Passwords in URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]+):[^\s@/]+@"), r"\1:" + MASK + "@"),
]
# key=value and key: value pairs whose key names a secret ("Authorization: Bearer x" keeps the
# scheme word and masks what follows it).
SECRET_PAIR = re.compile(
    r"(?i)\b([\w-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|authorization)[\w-]*)(\s*[=:]\s*)((?:bearer|basic)\s+)?(\"[^\"]*\"|'[^']*'|[^\s&,;\"']+)"
)


def _mask_pair(match: re.Match[str]) -> str:
    key, separator, scheme, _value = match.groups()
    if not is_secret_key(key):
        return match.group(0)
    return f"{key}{separator}{scheme or ''}{MASK}"


def redact_text(value: str) -> str:
    """``value`` with every recognised secret replaced by ``[REDACTED]``."""
    # Short strings (ids, names, codes) repeat across events: remember their answer.
    return _redact_short(value) if len(value) <= CACHED_TEXT_CHARS else _redact_text(value)


def _redact_text(value: str) -> str:
    for pattern, replacement in SECRET_PATTERNS:
        value = pattern.sub(replacement, value)
    return SECRET_PAIR.sub(_mask_pair, value)


CACHED_TEXT_CHARS = 200
_redact_short = functools.lru_cache(maxsize=8192)(_redact_text)


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    lowered = name.lower()
    if lowered in NON_SECRET_KEYS or lowered.endswith(NON_SECRET_SUFFIXES):
        return False
    if any(part in lowered for part in NON_SECRET_PARTS):
        return False
    return bool(SECRET_KEY_NAME.search(name))


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets masked at any depth; non-text values are kept as is."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: (
                MASK if is_secret_key(key) and value[key] not in (None, "") else redact(value[key])
            )
            for key in value
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def redact_payload(payload: dict[str, Any], preview_chars: int) -> dict[str, Any]:
    """The payload as it may be stored: secrets masked, ``raw_output_preview`` truncated."""
    cleaned = redact(payload)
    preview = cleaned.get("raw_output_preview")
    if isinstance(preview, str) and len(preview) > preview_chars:
        cleaned["raw_output_preview"] = (
            preview[:preview_chars] + f"… [truncated {len(preview) - preview_chars} characters]"
        )
    return cleaned
