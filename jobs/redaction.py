"""Secrets masked before anything is stored (DESIGN.md section 8, source 001's redaction rules).

Pure: plain data in, plain data out. Masks bearer tokens, API keys, JWTs, passwords in URLs,
``key=value`` pairs and the values of JSON keys named like a secret, anywhere in a payload, and
truncates raw planner output previews.
"""

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

SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization: Bearer <token> / Basic <credentials>
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*"), r"\1 " + MASK),
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
    # key=value and key: value pairs whose key names a secret.
    (
        re.compile(
            r"(?i)\b([\w-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
            r"|authorization)[\w-]*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s&,;\"']+)"
        ),
        r"\1\2" + MASK,
    ),
]


def redact_text(value: str) -> str:
    """``value`` with every recognised secret replaced by ``[REDACTED]``."""
    for pattern, replacement in SECRET_PATTERNS:
        value = pattern.sub(replacement, value)
    return value


def is_secret_key(name: str) -> bool:
    return name.lower() not in NON_SECRET_KEYS and bool(SECRET_KEY_NAME.search(name))


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets masked at any depth; non-text values are kept as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: (MASK if is_secret_key(key) and value[key] not in (None, "") else redact(value[key]))
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
