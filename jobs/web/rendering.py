"""How pages render: in the display time zone, whole or as the fragment an HTMX request swaps,
with step links that survive any node id."""

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


def step_query(node_id: str, attempt: int) -> str:
    """``step=<node_id>:<attempt>`` with the node id URL-encoded (the colon stays readable)."""
    return f"step={quote(node_id, safe='')}:{attempt}"


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
