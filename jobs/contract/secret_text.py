"""Secrets inside free text (docs/contract.md, "Redaction"): which spans of a string to mask.

Pure. Token formats with a maintained detector come from ``detect-secrets``' plugins (used as a
library: their ``denylist`` patterns, never their scanner or network checks); the formats it
does not cover are written here, each with a line saying what it is. Structured text (headers,
``key=value``, JSON inside a string) is the concern of ``redaction``, which calls ``mask_tokens``.
"""

import base64
import binascii
import re

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

MASK = "[REDACTED]"

# detect-secrets' token detectors whose patterns match only the token itself. Left out: the
# keyword and high-entropy detectors (they flag ordinary ids and hashes), basic auth (a port
# and an '@' in a path read as a password: URL credentials are below), the artifactory
# patterns (capitalised words such as "APACHEKAFKA1" match) and the private-key headers (the
# whole PEM block is masked below, not only its first line).
LIBRARY_DETECTORS = (
    AWSKeyDetector,
    AzureStorageKeyDetector,
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    JwtTokenDetector,
    MailchimpDetector,
    NpmDetector,
    OpenAIDetector,
    PypiTokenDetector,
    SendGridDetector,
    SlackDetector,
    SquareOAuthDetector,
    StripeDetector,
    TelegramBotTokenDetector,
    TwilioKeyDetector,
)
# Each detector's patterns run only on text holding one of its needles (lowercase literals
# every match contains): a substring test is far cheaper than a regular expression scan, and
# most text holds no token at all. An empty tuple: always run.
LIBRARY_NEEDLES: dict[type, tuple[str, ...]] = {
    AWSKeyDetector: ("a3t", "abia", "acca", "akia", "asia", "aws"),
    AzureStorageKeyDetector: ("accountkey=",),
    DiscordBotTokenDetector: (".",),
    GitHubTokenDetector: ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    GitLabTokenDetector: (
        *("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-"),
        *("glimt-", "glptt-", "glagent-", "gloas-"),
    ),
    JwtTokenDetector: ("eyj",),
    MailchimpDetector: ("-us",),
    NpmDetector: ("_authtoken",),
    OpenAIDetector: ("t3blbkfj",),
    PypiTokenDetector: ("pypi-",),
    SendGridDetector: ("sg.",),
    SlackDetector: ("xox", "hooks.slack"),
    SquareOAuthDetector: ("sq0csp-",),
    StripeDetector: ("_live_",),
    TelegramBotTokenDetector: (":",),
    TwilioKeyDetector: ("ac", "sk"),
}
LIBRARY_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (pattern, LIBRARY_NEEDLES[detector])
    for detector in LIBRARY_DETECTORS
    for pattern in detector.denylist
)

# Formats detect-secrets has no plugin for (or only an older shape of), with their needles.
OWN_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), needles)
    for pattern, needles in (
        # LLM providers: OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), OpenRouter (sk-or-), and
        # the same shape with rk-/pk- prefixes; Hugging Face, Groq, xAI, Replicate, Perplexity.
        (r"\b(?:sk|rk|pk)-[A-Za-z0-9][A-Za-z0-9_\-]{15,}", ("sk-", "rk-", "pk-")),
        (r"\bhf_[A-Za-z0-9]{30,}", ("hf_",)),
        (r"\bgsk_[A-Za-z0-9]{40,}", ("gsk_",)),
        (r"\bxai-[A-Za-z0-9]{40,}", ("xai-",)),
        (r"\br8_[A-Za-z0-9]{30,}", ("r8_",)),
        (r"\bpplx-[A-Za-z0-9]{40,}", ("pplx-",)),
        # Payment keys in test mode and webhook signing secrets (live keys: the library's).
        (r"\b(?:sk|rk)_test_[0-9a-zA-Z]{16,}", ("_test_",)),
        (r"\bwhsec_[0-9a-zA-Z]{24,}", ("whsec_",)),
        # Source hosts: GitHub fine-grained tokens, Bitbucket app passwords.
        (r"\bgithub_pat_[A-Za-z0-9_]{20,}", ("github_pat_",)),
        (r"\bgh[pousr]_[A-Za-z0-9]{20,}", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        (r"\bATBB[A-Za-z0-9]{24,}", ("atbb",)),
        # Google API keys and OAuth access tokens; Azure AD client secrets and SAS signatures.
        (r"\bAIza[0-9A-Za-z_\-]{35}", ("aiza",)),
        (r"\bya29\.[0-9A-Za-z_\-]{20,}", ("ya29.",)),
        (r"(?<![\w.~-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}", ("q~",)),
        (r"(?i)(?<=[?&;])sig=[A-Za-z0-9%+/=]{16,}", ("sig=",)),
        # Chat incoming webhooks: Discord, Microsoft Teams, Google Chat, Mattermost-style hooks.
        (r"(?i)https://(?:\w+\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w\-]+", ("/webhooks/",)),
        (r"(?i)https://[\w.\-]+\.webhook\.office\.com/webhook\w*/[^\s\"'<>]+", (".webhook.",)),
        (r"(?i)https://chat\.googleapis\.com/v1/spaces/[^\s\"'<>]+", ("chat.googleapis",)),
        (r"(?i)https?://[\w.\-]+/hooks/[a-z0-9]{20,}", ("/hooks/",)),
        # traceviz's own ingest tokens (IngestToken.issue: "tvz_" + token_urlsafe(32)).
        (r"\btvz_[A-Za-z0-9_\-]{20,}", ("tvz_",)),
        # Package registries: npm access tokens (npm_; the library knows only _authToken=
        # lines), RubyGems API keys, Docker Hub personal access tokens.
        (r"\bnpm_[A-Za-z0-9]{36}", ("npm_",)),
        (r"\brubygems_[a-f0-9]{48}", ("rubygems_",)),
        (r"\bdckr_pat_[A-Za-z0-9_\-]{20,}", ("dckr_pat_",)),
        # Shopify access tokens and shared secrets (shpat_, shpca_, shppa_, shpss_).
        (r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", ("shpat_", "shpca_", "shppa_", "shpss_")),
        # HashiCorp Vault service, batch and recovery tokens (hvs., hvb., hvr.).
        (r"\bhv[sbr]\.[A-Za-z0-9_\-]{24,}", ("hvs.", "hvb.", "hvr.")),
        # DigitalOcean personal, OAuth and refresh tokens.
        (r"\bdo[opr]_v1_[a-f0-9]{64}", ("dop_v1_", "doo_v1_", "dor_v1_")),
        # Sentry organisation auth tokens (sntrys_, base64 inside) and user auth tokens.
        (r"\bsntrys_[A-Za-z0-9+/=_\-]{40,}", ("sntrys_",)),
        (r"\bsntryu_[a-f0-9]{64}", ("sntryu_",)),
        # Doppler personal, service, CLI, service-account, SCIM and audit tokens.
        (r"\bdp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}", ("dp.",)),
        # Linear personal API keys and OAuth tokens.
        (r"\blin_(?:api|oauth)_[A-Za-z0-9]{40,64}", ("lin_api_", "lin_oauth_")),
        # HubSpot private app access tokens: pat-<region>-<uuid>.
        (
            r"\bpat-(?:na|eu|ap)\d-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            ("pat-",),
        ),
        # Postman API keys.
        (r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}", ("pmak-",)),
        # Databricks personal access tokens.
        (r"\bdapi[a-f0-9]{32}(?:-\d)?", ("dapi",)),
        # Grafana service account tokens and Grafana Cloud access policy tokens.
        (r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", ("glsa_",)),
        (r"\bglc_[A-Za-z0-9+/]{32,}={0,2}", ("glc_",)),
        # Pulumi access tokens; Terraform Cloud / Enterprise API tokens (<14>.atlasv1.<60+>).
        (r"\bpul-[a-f0-9]{40}", ("pul-",)),
        (r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,}", (".atlasv1.",)),
        # New Relic user API keys and ingest keys.
        (r"\bNR(?:AK|II|JS|RA)-[A-Za-z0-9]{19,32}", ("nrak-", "nrii-", "nrjs-", "nrra-")),
        # Notion integration tokens (ntn_, and the older secret_ with 43 characters).
        (r"\bntn_\d{11}[A-Za-z0-9]{35}", ("ntn_",)),
        (r"\bsecret_[A-Za-z0-9]{43}\b", ("secret_",)),
        # Figma personal access tokens.
        (r"\bfigd_[A-Za-z0-9_\-]{40}", ("figd_",)),
        # PlanetScale service tokens, passwords and OAuth tokens.
        (r"\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=\-]{32,64}", ("pscale_",)),
        # Supabase management API tokens and secret keys.
        (r"\bsbp_[a-f0-9]{40}", ("sbp_",)),
        (r"\bsb_secret_[A-Za-z0-9_\-]{20,}", ("sb_secret_",)),
        # Heroku API keys (the HRKU- format).
        (r"\bHRKU-[A-Za-z0-9_\-]{40,}", ("hrku-",)),
        # LangSmith API keys (personal and service); Pinecone API keys.
        (r"\blsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", ("lsv2_",)),
        (r"\bpcsk_[A-Za-z0-9_]{40,}", ("pcsk_",)),
        # age encryption secret keys (Bech32).
        (r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", ("age-secret-key-",)),
        # Alibaba Cloud AccessKey ids.
        (r"\bLTAI[A-Za-z0-9]{20}\b", ("ltai",)),
        # Airtable personal access tokens.
        (r"\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}", ("pat",)),
        # Dynatrace API tokens.
        (r"\bdt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}", ("dt0c01.",)),
        # Sendinblue (Brevo) API keys.
        (r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}", ("xkeysib-",)),
        # Atlassian API tokens, Clojars tokens, Shippo and Duffel keys, Prefect API keys.
        (r"\bATATT3[A-Za-z0-9_\-=]{100,}", ("atatt3",)),
        (r"(?i)\bCLOJARS_[a-z0-9]{60}", ("clojars_",)),
        (r"\bshippo_(?:live|test)_[a-f0-9]{40}", ("shippo_",)),
        (r"\bduffel_(?:test|live)_[A-Za-z0-9_\-=]{43}", ("duffel_",)),
        (r"\bpnu_[A-Za-z0-9]{36}", ("pnu_",)),
        # Square access tokens, Cloudflare Origin CA keys, 1Password service account tokens.
        (r"\bEAAA[A-Za-z0-9_\-]{60}\b|\bsq0atp-[A-Za-z0-9_\-]{22}", ("eaaa", "sq0atp-")),
        (r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}", ("v1.0-",)),
        (r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}", ("ops_",)),
    )
)
TOKEN_PATTERNS = LIBRARY_PATTERNS + OWN_PATTERNS
# Every token format above holds at least this many characters without a space (the corpus
# test checks each format, also inside prose).
MIN_TOKEN_CHARS = 16
MIN_BASE64_CHARS = 12
# Every needle: the ones a text holds are found by substring tests (in C, each a fast scan),
# quicker than one scan with an alternation of them all.
NEEDLES = frozenset(needle for _pattern, needles in TOKEN_PATTERNS for needle in needles)
# Text shaped like these holds no token format: trace, span and event ids and hashes (lowercase
# hex, ':' and '-'; the one format with ':' wants 35 characters after it, none of them after 8
# to 10 digits here), the event ids the OTLP mapping builds from them ("otlp:<trace>:<span>"),
# and RFC 3339 timestamps. Card numbers and base64 credentials are checked on their own below.
SHAPED_ID = r"(?:otlp:)?[0-9a-f:\-]+"
SHAPED_TEXT = re.compile(
    SHAPED_ID + r"|\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})?"
)
# An id of that shape (hex, ':' and '-': a trace or span id, an OTLP event id) is printable,
# has no space, no '.' and no '/', and holds no token format: no id rule can refuse it.
HEX_ID = re.compile(SHAPED_ID)
# A match is widened to the end of its token: several library patterns fix a length that newer
# keys exceed (Stripe), and the JWT pattern stops before the signature.
TOKEN_TAIL = re.compile(r"[\w\-+/=]*(?:\.[\w\-+/=]+)*")

# A PEM private key block, header to footer (or to the end of a cut text).
PEM_BLOCK = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END \1PRIVATE KEY\2-----|\Z)"
    r"|PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: \w+|\Z)",
    re.DOTALL,
)
# Credentials in a URL of any scheme: user:password@host. The password may hold '/' or '@' (the
# last '@' before the host ends it); "host:8080/path@x" is a port, not a password.
URL_CREDENTIALS = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@\"'<>]*):([^\s\"'<>]+)@(?=[\w\[])"
)
PORT_AND_PATH = re.compile(r"\d{1,5}(?:/.*)?")
# Card numbers: 13 to 19 digits (spaces or dashes between groups) with a known issuer prefix,
# kept only when the Luhn check passes.
CARD_NUMBER = re.compile(r"(?<![\w.])(?:\d[ \-]?){12,18}\d(?![\w])")
CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[0689]|6(?:011|5|4[4-9]|2)|35")
# A base64 word, alone in the text: masked when it decodes to "user:password" (the credentials
# of Basic authentication) or to text holding a token format.
BASE64_WORD = re.compile(r"(?<![\w+/=])[A-Za-z0-9+/]{12,}={0,2}(?![\w+/=])")
# A hex word of at least 16 bytes: masked when it decodes to text holding a token format (hashes
# and ids decode to bytes that are not text).
HEX_WORD = re.compile(r"(?<![\w])(?:[0-9a-fA-F]{2}){16,}(?![\w])")
BASIC_CREDENTIALS = re.compile(r"[\w.@+\-]{1,64}:[!-~]{1,128}")


def mask_tokens(text: str) -> str:
    """``text`` with every token-shaped secret, PEM block, URL password, card number and base64
    credential replaced by ``MASK``, and every base64 or hex word that decodes to a token."""
    longest_word = max(map(len, text.split()), default=0)
    text = _mask_formats(text, longest_word)
    text = CARD_NUMBER.sub(_mask_card, text)
    if longest_word >= MIN_BASE64_CHARS:
        text = BASE64_WORD.sub(_mask_basic_credentials, text)
    if longest_word >= 2 * MIN_TOKEN_CHARS:
        text = HEX_WORD.sub(_mask_hex_token, text)
    return text


def mask_formats(text: str) -> str:
    """``text`` with every credential in a format nothing else has masked: token formats, PEM
    private keys, URL passwords. Not card numbers nor base64 words: digits and base64 are also
    what ordinary ids are made of."""
    return _mask_formats(text, max(map(len, text.split()), default=0))


def contains_token(text: str) -> bool:
    """Whether ``mask_formats`` would mask something in ``text``."""
    return mask_formats(text) != text


def _mask_formats(text: str, longest_word: int) -> str:
    """``text`` with every token-shaped secret, PEM block and URL password masked.
    ``longest_word``: the length of its longest run without a space."""
    if "PRIVATE KEY" in text or "PuTTY" in text:
        text = PEM_BLOCK.sub(MASK, text)
    if "://" in text and "@" in text:
        text = URL_CREDENTIALS.sub(_mask_url_password, text)
    # Every token format is one long word: text whose words are all short (most prose) skips
    # their patterns.
    if longest_word >= MIN_TOKEN_CHARS and not SHAPED_TEXT.fullmatch(text):
        lowered = text.lower()
        present = {needle for needle in NEEDLES if needle in lowered}
        for pattern, needles in TOKEN_PATTERNS:
            if not needles or not present.isdisjoint(needles):
                text = _mask_matches(pattern, text)
    return text


def _mask_matches(pattern: re.Pattern[str], text: str) -> str:
    """Every match of ``pattern`` masked, widened to the end of its token: from its first group
    when that group does not begin the match (the value beside a keyword, as in
    ``aws_secret_access_key = "..."``), else the whole match."""
    pieces, position = [], 0
    for match in pattern.finditer(text):
        start, end = match.span()
        if pattern.groups and match.start(1) > start:
            start, end = match.span(1)
        if tail := TOKEN_TAIL.match(text, end):  # always matches (it may match nothing)
            end = tail.end()
        if start < position or MASK in text[start:end]:
            continue
        pieces += [text[position:start], MASK]
        position = end
    if not pieces:
        return text
    return "".join(pieces) + text[position:]


def _mask_url_password(match: re.Match[str]) -> str:
    prefix, password = match.groups()
    if PORT_AND_PATH.fullmatch(password) or password == MASK:
        return match.group(0)
    return f"{prefix}:{MASK}@"


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ \-]", "", match.group(0))
    return MASK if _is_card_digits(digits) else match.group(0)


def _is_card_digits(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and bool(CARD_PREFIX.match(digits)) and luhn_valid(digits)


def is_card_number(value: int) -> bool:
    """Whether an integer (a JSON number) is a card number: 13 to 19 digits with a known
    issuer prefix that pass the Luhn check. Callers keep the numbers under id keys."""
    return 10**12 <= value < 10**19 and _is_card_digits(str(value))


def luhn_valid(digits: str) -> bool:
    """Whether a string of decimal digits passes the Luhn checksum of card numbers."""
    total = 0
    for index, digit in enumerate(reversed(digits)):
        value = int(digit)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _mask_basic_credentials(match: re.Match[str]) -> str:
    word = match.group(0)
    padding = -len(word) % 4
    if padding == 3:
        return word
    try:
        decoded = base64.b64decode(word + "=" * padding, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return word
    if BASIC_CREDENTIALS.fullmatch(decoded) or (decoded.isprintable() and contains_token(decoded)):
        return MASK
    return word


def _mask_hex_token(match: re.Match[str]) -> str:
    word = match.group(0)
    try:
        decoded = bytes.fromhex(word).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return word
    return MASK if decoded.isprintable() and contains_token(decoded) else word
