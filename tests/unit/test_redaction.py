"""Secrets are masked before anything is stored; ordinary text is left alone; what was masked is
said by path (docs/contract.md, "Redaction")."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.contract import redaction
from jobs.contract.events import MAX_REASON_BYTES
from jobs.contract.redaction import (
    COMPOUND_ENDINGS,
    KEY_WORDS,
    MASK,
    MAX_MASKED_PATHS,
    RUN_TOGETHER,
    Word,
    is_secret_key,
    key_words,
    names_an_id,
    redact,
    redact_payload,
    redact_text,
    redacted,
)

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
    payload = {"token": "abc", "reason": "password=hunter2", "ghp_" + "a" * 36: 1}
    sent = dict(payload)
    redact_payload(payload, 512)
    assert payload == sent


def test_raw_output_preview_is_truncated_to_512_characters_by_default():
    from django.conf import settings

    preview = "a" * 2000
    cleaned, _ = redact_payload({"raw_output_preview": preview}, settings.TRACEVIZ_PREVIEW_CHARS)
    assert settings.TRACEVIZ_PREVIEW_CHARS == 512
    assert cleaned["raw_output_preview"] == "a" * 512 + "… [truncated 1488 characters]"


def test_short_raw_output_preview_is_kept_whole():
    assert redact_payload({"raw_output_preview": "{}"}, 512) == ({"raw_output_preview": "{}"}, ())


def test_secret_in_raw_output_preview_is_masked_before_truncation():
    preview = "x" * 500 + " sk-abcdefghijklmnopqrstuvwxyz " + "y" * 100
    cleaned = redact_payload({"raw_output_preview": preview}, 512).value["raw_output_preview"]
    assert "sk-abcdefghij" not in cleaned
    assert cleaned.startswith("x" * 500 + " " + MASK)


@pytest.mark.parametrize(
    "key",
    ["llm.token_count.prompt", "llm.token_count.total", "gen_ai.usage.input_tokens"],
)
def test_llm_token_counts_are_usage_figures_not_secrets(key):
    assert redact({key: 1200}) == {key: 1200}


# --- which keys name a secret: the words of the key, the last one the noun ---------------------

SECRET_KEYS = [
    *("password", "db_password", "PASSWORD", "passwd", "pwd", "passphrase", "password2"),
    *("secret", "client_secret", "clientSecret", "secrets", "token", "id_token", "X-Auth-Token"),
    *("auth", "basic_auth", "authorization", "Authorization", "Proxy-Authorization"),
    *("http.request.header.authorization", "credential", "credentials", "cookie", "cookies"),
    *("Set-Cookie", "http.response.header.set-cookie", "api_key", "x-api-key", "apiKey", "APIKey"),
    *("AWS_SECRET_ACCESS_KEY", "ssh_key", "private_key", "refresh_tokens", "access_token"),
    *("OAuth2Token", "signing_keys", "session_key", "encryption_key", "bearer-token", "session"),
    *("apikey", "accesskey", "secretkey", "privatekey", "authtoken", "accesstoken", "PGPASSWORD"),
    *("dbpassword", "OAuthToken", "openai.api_key"),
]
ORDINARY_KEYS = [
    *("password_reset_sent", "cookie_consent", "secret_santa_group", "token_count"),
    *("credential_type", "auth_method", "tokenizer", "max_tokens", "passenger", "bypass"),
    *("passenger_count", "bypass_cache", "tests_passed", "passed", "compass_heading"),
    *("passage_count", "session_id", "token_name", "tokens", "prompt_tokens", "total_tokens"),
    *("llm.token_count.prompt", "gen_ai.usage.input_tokens", "key", "keys", "sort_key"),
    *("primary_key", "cache_key", "user_session", "preauthorization", "OLDPWD", "keyboard"),
    *("monkey", "author", "authority", "secretary", "passport", "idempotency_key"),
    *("bos_token", "eos_token", "pad_token", "nextPageToken", "page_token", "id_token_claims"),
    "tiktoken",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_key_whose_noun_is_a_secret_is_masked(key):
    assert is_secret_key(key)
    assert redacted({key: "opaque-value-1"}) == ({key: MASK}, (key,))


@pytest.mark.parametrize("key", ORDINARY_KEYS)
def test_key_that_only_mentions_a_secret_word_is_kept(key):
    assert not is_secret_key(key)
    payload = {"payload_results": {key: "opaque-value-1", f"{key}_n": 1843}}
    assert redacted(payload) == (payload, ())


def test_every_word_of_the_table_does_what_it_says():
    for word, roles in KEY_WORDS.items():
        # Whatever it is, a secret word that qualifies an ordinary noun names no secret.
        assert not is_secret_key(f"{word}_count"), word
        assert is_secret_key(f"db_{word}") is (Word.SECRET in roles), word
        assert is_secret_key(word) is bool(roles & (Word.SECRET | Word.ALONE)), word
        for qualified in ("_key", "Keys", "-tokens"):
            assert is_secret_key(word + qualified) is (Word.QUALIFIER in roles), word
        if Word.QUALIFIED in roles:
            assert is_secret_key(f"api_{word}") and not is_secret_key(f"sort_{word}"), word
        assert names_an_id(f"order_{word}") is (Word.ID in roles), word
        assert is_secret_key(f"{word}_token") is not (Word.TEXT in roles), word
        assert not names_an_id(f"{word}_count"), word


def test_every_run_together_compound_reads_as_its_words():
    for compound, words in RUN_TOGETHER.items():
        assert key_words(compound) == list(words)
        assert key_words(compound.upper()) == list(words)
        assert is_secret_key(compound) is is_secret_key("_".join(words)), compound


def test_every_word_ending_in_a_secret_noun_is_a_compound_of_it():
    for ending in COMPOUND_ENDINGS:
        assert key_words(f"pg{ending}") == ["pg", ending]
        assert key_words(f"PG{ending.upper()}") == ["pg", ending]
        assert is_secret_key(f"pg{ending}") and is_secret_key(ending), ending
        assert not is_secret_key(f"pg{ending}_count"), ending


def test_key_words_split_at_separators_camel_case_and_digits():
    assert key_words("AWS_SECRET_ACCESS_KEY") == ["aws", "secret", "access", "key"]
    assert key_words("x-api-key") == ["x", "api", "key"]
    assert key_words("clientSecret") == ["client", "secret"]
    assert key_words("HTTPAuthorization") == ["http", "authorization"]
    assert key_words("oauth2.token") == ["oauth", "token"]
    assert key_words("gen_ai.usage.input_tokens") == ["gen", "ai", "usage", "input", "tokens"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tests_passed=1843 bypass_cache=true", "tests_passed=1843 bypass_cache=true"),
        ("password_reset_sent: yes, token_count: 12", "password_reset_sent: yes, token_count: 12"),
        ("api_key=k-live-998877 max_tokens=4096", f"api_key={MASK} max_tokens=4096"),
        ("export PGPASSWORD=hunter2", f"export PGPASSWORD={MASK}"),
        ("tests/test_login.py::TestAuth::test_password", None),
        ("pip install tiktoken==0.8.0 sessions=4", None),
        ('{"clientSecret": "q8w9e0r", "tokenizer": "cl100k"}', None),
    ],
)
def test_pairs_in_text_follow_the_key_rule(text, expected):
    if expected is None:
        expected = text.replace("q8w9e0r", MASK)
    assert redact_text(text) == expected


def test_header_list_and_name_value_objects_follow_the_key_rule():
    headers = [["Cookie-Consent", "yes"], ["X-Api-Key", "k-1"], ["Set-Cookie", "sid=1"]]
    har = [{"name": "cookie_consent", "value": "all"}, {"name": "Cookie", "value": "sid=2"}]
    assert redacted({"headers": headers, "har": har}) == (
        {
            "headers": [["Cookie-Consent", "yes"], ["X-Api-Key", MASK], ["Set-Cookie", MASK]],
            "har": [{"name": "cookie_consent", "value": "all"}, {"name": "Cookie", "value": MASK}],
        },
        ("headers[1]", "headers[2]", "har[1].value"),
    )


def test_true_false_and_null_under_a_secret_key_are_kept():
    payload = {"auth": True, "token": False, "password": None}
    assert redacted(payload) == (payload, ())


# --- what was masked, by path ------------------------------------------------------------------


def test_masked_paths_name_where_never_what():
    payload = {
        "reason": "retry with token=tokSecretValue77",
        "payload_results": {"password": "hunter2pw", "tests_passed": 1843},
        "context": {"actual_arguments": {"headers": [["Accept", "*/*"], ["Authorization", "x"]]}},
        "audit_trail": ["ok", "login password=hunter2pw"],
    }
    cleaned, masked = redacted(payload)
    assert masked == (
        "reason",
        "payload_results.password",
        "context.actual_arguments.headers[1]",
        "audit_trail[1]",
    )
    assert cleaned["payload_results"] == {"password": MASK, "tests_passed": 1843}
    assert "hunter2pw" not in repr(masked) and "tokSecretValue77" not in repr(masked)


def test_redacting_again_masks_nothing_more():
    payload = {
        "reason": "Authorization: Bearer abcDEF0123456789 and https://bob:s3cr3t!@example.com/x",
        "cookie": "sid=1",
        "nested": '{"password": "inJsonPw123", "user": "bob"}',
        "ghp_" + "a" * 36: 1,
    }
    cleaned, masked = redacted(payload)
    assert len(masked) == 4
    assert redacted(cleaned) == (cleaned, ())


def test_a_payload_of_many_secrets_records_its_first_paths_and_how_many_more():
    payload = {f"password_{index}": "x" for index in range(150)}
    _, masked = redacted(payload)
    assert len(masked) == MAX_MASKED_PATHS
    assert masked[0] == "password_0"
    assert masked[-1] == f"… and {150 - MAX_MASKED_PATHS + 1} more"


# --- a key that is itself a secret -------------------------------------------------------------

GITHUB_TOKEN = "ghp_" + "CorpusGithub0123456789abcdefABCDEF12"
OPENAI_KEY = "sk-proj-SECRETsk0123456789abcdefXYZ"


def test_key_that_is_a_secret_is_masked_and_its_value_kept():
    cleaned, masked = redacted({"repos": {GITHUB_TOKEN: 1, "main": 2}})
    assert cleaned == {"repos": {MASK: 1, "main": 2}}
    assert masked == (f"repos.{MASK}",)


def test_keys_that_are_secrets_stay_apart_from_each_other_and_from_the_others():
    cleaned, masked = redacted({GITHUB_TOKEN: 1, MASK: "sent as is", OPENAI_KEY: "x"})
    assert cleaned == {f"{MASK} 2": 1, MASK: "sent as is", f"{MASK} 3": "x"}
    assert masked == (f"{MASK} 2", f"{MASK} 3")


def test_key_holding_a_secret_keeps_the_rest_of_its_text():
    cleaned, _ = redacted({f"retry {OPENAI_KEY}": 1})
    assert cleaned == {f"retry {MASK}": 1}


# --- redaction before truncation ---------------------------------------------------------------


@pytest.mark.parametrize("field", ["reason", "message", "stack"])
def test_secret_straddling_the_64_kib_cut_is_masked_whole(field):
    filler = "x" * (MAX_REASON_BYTES - 60)
    payload = {field: f"{filler} {GITHUB_TOKEN} " + "y" * 1000}
    cleaned, masked = redact_payload(payload, 512)
    text = cleaned[field]
    assert len(text.encode()) <= MAX_REASON_BYTES
    assert "ghp_" not in text and "CorpusGithub" not in text
    assert text.startswith(f"{filler} {MASK}")
    assert masked == (field,)


# --- a value under a key that names an id is an id ---------------------------------------------


def test_value_under_an_id_key_is_masked_only_for_a_credential_format():
    payload = {
        "order_id": "4111111111111111",
        "requestId": "dXNlcjpzM2NyM3RQYXNz",
        "passenger_ids": ["5555555555554444", "378282246310005"],
        "session.id": "session:1234",
        "push_id": f"push-{GITHUB_TOKEN}",
        "card_number": "4111111111111111",
        "note": "card 4111 1111 1111 1111 declined",
    }
    cleaned, masked = redacted(payload)
    assert cleaned == {
        **payload,
        "push_id": f"push-{MASK}",
        "card_number": MASK,
        "note": f"card {MASK} declined",
    }
    assert masked == ("push_id", "card_number", "note")


# --- what redaction skips -------------------------------------------------------------------

PLAIN_WORD_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
# Starts of token formats and keywords of the rules, so that generated words come near them.
NEAR_SECRETS = [
    "sk-",
    "ghp_",
    "AKIA",
    "xoxb-",
    "eyJ",
    "pat",
    "sig",
    "key",
    "pass",
    "bearer",
    "4111",
]


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["", *NEAR_SECRETS]),
    st.text(alphabet=PLAIN_WORD_CHARS, min_size=0, max_size=11),
)
def test_what_redaction_skips_no_rule_would_mask(start, rest):
    """Text ``cannot_hold_secret`` lets through unlooked at comes out of every rule unchanged."""
    value = (start + rest)[:11]
    if value and redaction.cannot_hold_secret(value) and len(value) >= 6:
        assert redaction._apply_rules(value, True) == value


@pytest.mark.parametrize(
    "value",
    [
        "step-12",
        "gpt-4.1",
        "node_7.a",
        "abcdefghijk",
        "12345678901",
    ],
)
def test_plain_words_shorter_than_any_token_are_skipped(value):
    assert redaction.cannot_hold_secret(value)


@pytest.mark.parametrize(
    "value",
    [
        "abcdefghijkl",  # a base64 word's length
        "pwd=hunter2",
        "bearer abcdef",
        "u:pw@host",
        "<p>x</p>",
        "4111111111111111",
    ],
)
def test_text_a_rule_may_match_is_looked_at(value):
    assert not redaction.cannot_hold_secret(value)


def test_numbers_and_flags_under_plain_keys_are_kept_and_card_numbers_still_masked():
    payload = {"count": 3, "ratio": 0.5, "ok": True, "none": None, "card": 4111111111111111}
    cleaned, masked = redaction.redacted(payload)
    assert cleaned == {**payload, "card": MASK}
    assert masked == ("card",)
