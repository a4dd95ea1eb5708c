"""How pages render: in the display time zone, whole or as the fragment an HTMX request swaps,
with step links that survive any node id."""

import hashlib
from functools import wraps
from urllib.parse import quote
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone


def in_display_time_zone(view):
    """Render in TRACEVIZ_DISPLAY_TIME_ZONE (the pages show its offset beside times)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        with timezone.override(ZoneInfo(settings.TRACEVIZ_DISPLAY_TIME_ZONE)):
            return view(request, *args, **kwargs)

    return wrapper


def wants_fragment(request) -> bool:
    """An HTMX request that is not a history restore (the back button gets the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def display_zone() -> dict:
    offset = timezone.localtime().strftime("%z")
    return {"name": settings.TRACEVIZ_DISPLAY_TIME_ZONE, "offset": f"{offset[:3]}:{offset[3:]}"}


# A node id longer than this URL-encoded travels in step links in a short form,
# ``~<16 hex digits of its SHA-256>``: 200 characters of 4 UTF-8 bytes are 2,400 bytes encoded,
# and beside a job id as long in the path the request line passes gunicorn's 4,094 bytes (414).
MAX_LINK_NODE_BYTES = 200
SHORT_NODE_PREFIX = "~"
SHORT_NODE_DIGITS = 16
# No node id of this many characters or fewer is long enough for the short form (a character
# is at most 12 bytes URL-encoded): the lookup of a short form reads only longer ones.
MAX_CHARS_OF_A_LINKED_NODE = MAX_LINK_NODE_BYTES // 12


def link_node(node_id: str) -> str:
    """How ``node_id`` travels in a step link: itself, or its short form when it is long
    URL-encoded. ``step_panel.resolve_step_key`` reads either."""
    if len(node_id) <= MAX_CHARS_OF_A_LINKED_NODE or len(quote(node_id, safe="")) <= (
        MAX_LINK_NODE_BYTES
    ):
        return node_id
    digest = hashlib.sha256(node_id.encode("utf-8", "surrogatepass")).hexdigest()
    return SHORT_NODE_PREFIX + digest[:SHORT_NODE_DIGITS]


def is_short_node(value: str) -> bool:
    """Whether ``value`` has the form of a short node id (``link_node``)."""
    digits = value[len(SHORT_NODE_PREFIX) :]
    return (
        value.startswith(SHORT_NODE_PREFIX)
        and len(digits) == SHORT_NODE_DIGITS
        and all(char in "0123456789abcdef" for char in digits)
    )


def link_step_key(step_key: str) -> str:
    """A ``node:attempt`` key as step links carry it (its node in ``link_node``'s form)."""
    node_id, sep, attempt = step_key.rpartition(":")
    return f"{link_node(node_id)}:{attempt}" if sep else step_key


def step_query(node_id: str, attempt: int) -> str:
    """``step=<node_id>:<attempt>`` with the node id URL-encoded (the colon stays readable), a
    long one in its short form (``link_node``)."""
    return f"step={quote(link_node(node_id), safe='')}:{attempt}"


# The largest attempt a Step row holds (a 32-bit column).
MAX_STEP_ATTEMPT = 2**31 - 1


def bounded_int(raw: str | None, largest: int) -> int | None:
    """A non-negative integer written in ASCII digits, at most ``largest``; None for anything
    else. ``int`` alone also reads '²' (refused) or '١٢' (another number) and refuses past
    4,300 digits, and an offset or id past 64 bits fails the query it goes into."""
    if raw is None or not (raw.isascii() and raw.isdecimal()) or len(raw) > len(str(largest)):
        return None
    value = int(raw)
    return value if value <= largest else None


def parse_step_key(raw: str) -> tuple[str, int] | None:
    """``node:attempt`` split at the last colon (node ids may contain colons); None if malformed."""
    node_id, sep, attempt = raw.rpartition(":")
    number = bounded_int(attempt, MAX_STEP_ATTEMPT)
    if not sep or not node_id or number is None:
        return None
    return node_id, number
