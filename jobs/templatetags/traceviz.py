"""Template filters for the pages: times in the display time zone (the views activate it), and
the scripts an id mixes (its look-alike mark)."""

from datetime import datetime

from django import template
from django.utils import timezone

from jobs.contract import scripts

register = template.Library()


@register.filter
def clock(value: datetime | None) -> str:
    """``09:00:01.120``: time of day with milliseconds, in the current time zone."""
    if not isinstance(value, datetime):
        return ""
    local = timezone.localtime(value)
    return local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}"


@register.filter
def stamp(value: datetime | None) -> str:
    """``2026-03-02 09:00:01 +00:00``: date, time and the offset, in the current time zone."""
    if not isinstance(value, datetime):
        return ""
    local = timezone.localtime(value)
    offset = local.strftime("%z")
    return local.strftime("%Y-%m-%d %H:%M:%S ") + f"{offset[:3]}:{offset[3:]}"


@register.filter
def percent(value: float) -> str:
    """A CSS percentage that does not depend on the locale: ``12.345%``."""
    return f"{float(value):.3f}%"


@register.inclusion_tag("jobs/_mixed_scripts.html")
def mixed_script_mark(value: str) -> dict:
    """A badge beside an id whose letters mix scripts (``scripts.mixed_scripts``): it may be a
    look-alike of another id. Nothing for any other id."""
    return {"scripts": scripts.mixed_scripts(value) if isinstance(value, str) else ()}
