"""Secrets are masked before anything is stored; ordinary text is left alone (DESIGN.md 8)."""

import pytest

from jobs.contract.redaction import MASK, redact, redact_payload, redact_text

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
# (text containing a secret, the secret itself)
SECRET_SHAPES = [
    ("Authorization: Bearer abcDEF0123456789ghiJKL", "abcDEF0123456789ghiJKL"),
    ("curl -H 'authorization: bearer abcdefghijkl'", "abcdefghijkl"),
    ("bearer mF_9.B5f-4.1JqM", "mF_9.B5f-4.1JqM"),
    ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("openai key sk-abcdefghijklmnop1234567890 failed", "sk-abcdefghijklmnop1234567890"),
    ("sk-proj-AbC123dEf456GhI789jKl012mNo345", "sk-proj-AbC123dEf456GhI789jKl012mNo345"),
    ("sk-ant-api03-abcdefghijklmnopqrstuv", "sk-ant-api03-abcdefghijklmnopqrstuv"),
    ("aws AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"),
    (f"token was {JWT}", JWT),
    ("connect postgres://admin:hunter2@db.internal:5432/app", "hunter2"),
    ("https://bob:s3cr3t!@example.com/x", "s3cr3t!"),
    ("login password=hunter2&user=bob", "hunter2"),
    ("retry with token=abc123xyz", "abc123xyz"),
    ("client_secret: 'q8w9e0r'", "q8w9e0r"),
    ('api_key="k-live-998877"', "k-live-998877"),
    ("PASSWORD = correct-horse", "correct-horse"),
    (
        "push ghp_abcdefghijklmnopqrstuvwxyz0123456789 rejected",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11ABCDEFG0123456789"),
    ("gho_0123456789abcdefghijABCDEFGHIJ", "gho_0123456789abcdefghijABCDEFGHIJ"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
]
ORDINARY_TEXT = [
    "token expired",
    "Gmail.send: token expired",
    "upload: network timeout after 30s",
    "session_id=sess-123 not found",
    "max_tokens=4096 exceeded",
    "prompt_tokens: 1200",
    "basic information about the user",
    "the bearer of bad news",
    "release 991 created, asset upload failed",
    "see https://example.com/docs/errors#auth",
    "skip-this-step",
    "Expecting ',' delimiter: line 1 column 57",
]


@pytest.mark.parametrize(("text", "secret"), SECRET_SHAPES)
def test_secret_shape_in_text_is_masked(text, secret):
    redacted = redact_text(text)
    assert secret not in redacted
    assert MASK in redacted


def test_bearer_token_keeps_its_scheme_word():
    assert redact_text("Authorization: Bearer abcDEF0123456789") == "Authorization: Bearer " + MASK


def test_password_in_url_keeps_user_and_host():
    assert redact_text("postgres://admin:hunter2@db/app") == f"postgres://admin:{MASK}@db/app"


def test_key_value_pair_keeps_its_key():
    assert redact_text("password=hunter2 token=abc123") == f"password={MASK} token={MASK}"


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_text_is_untouched(text):
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "secret",
        "token",
        "api_key",
        "authorization",
        "Authorization",
        "apiKey",
        "client_secret",
        "access_token",
        "db_password",
        "refresh_token",
        "private_key",
    ],
)
def test_json_key_named_like_a_secret_is_masked_at_any_depth(key):
    payload = {"a": {"b": [{"c": {key: "opaque-value-1"}}]}}
    assert redact(payload) == {"a": {"b": [{"c": {key: MASK}}]}}


def test_json_secret_key_with_non_text_value_is_masked():
    assert redact({"password": 123456, "secret": {"nested": "x"}}) == {
        "password": MASK,
        "secret": MASK,
    }


@pytest.mark.parametrize(
    "key",
    [
        "session_id",
        "max_tokens",
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "token_count",
        "tokens",
    ],
)
def test_json_key_that_only_mentions_tokens_or_sessions_is_kept(key):
    payload = {"usage": {key: "sess-42" if key == "session_id" else 4096}}
    assert redact(payload) == payload


def test_empty_secret_value_stays_empty():
    assert redact({"token": "", "password": None}) == {"token": "", "password": None}


def test_secret_inside_list_of_strings_is_masked():
    assert redact({"validation_errors": ["bad token=abc123xyz"]}) == {
        "validation_errors": [f"bad token={MASK}"]
    }


def test_non_text_values_are_kept_as_they_are():
    payload = {"attempt": 2, "ok": True, "ratio": 0.5, "none": None}
    assert redact(payload) == payload


def test_redact_does_not_modify_its_input():
    payload = {"token": "abc", "reason": "password=hunter2"}
    redact_payload(payload, 512)
    assert payload == {"token": "abc", "reason": "password=hunter2"}


def test_raw_output_preview_is_truncated_to_512_characters_by_default():
    from django.conf import settings

    preview = "a" * 2000
    cleaned = redact_payload({"raw_output_preview": preview}, settings.TRACEVIZ_PREVIEW_CHARS)
    assert settings.TRACEVIZ_PREVIEW_CHARS == 512
    assert cleaned["raw_output_preview"] == "a" * 512 + "… [truncated 1488 characters]"


def test_short_raw_output_preview_is_kept_whole():
    assert redact_payload({"raw_output_preview": "{}"}, 512) == {"raw_output_preview": "{}"}


def test_secret_in_raw_output_preview_is_masked_before_truncation():
    preview = "x" * 500 + " sk-abcdefghijklmnopqrstuvwxyz " + "y" * 100
    cleaned = redact_payload({"raw_output_preview": preview}, 512)["raw_output_preview"]
    assert "sk-abcdefghij" not in cleaned
    assert cleaned.startswith("x" * 500 + " " + MASK)


@pytest.mark.parametrize(
    "key",
    ["llm.token_count.prompt", "llm.token_count.total", "gen_ai.usage.input_tokens"],
)
def test_llm_token_counts_are_usage_figures_not_secrets(key):
    assert redact({key: 1200}) == {key: 1200}
