"""The dashboard's time window: range and bucket choice from the URL, and links to the jobs list
filtered to exactly what a bar counts (the list filters ``since``/``until`` on job start, as the
dashboard buckets do)."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.db.models import Q
from django.utils import timezone

from jobs.dashboard import rollup, spans
from jobs.models import Job, Step, hour_floor, that_used

RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
DEFAULT_RANGE = "24h"
BUCKETS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_CUSTOM_RANGE = timedelta(days=92)
# Custom ranges stay inside these (as event times do): windows, previous windows and buckets
# computed around a time at the calendar's edge would overflow.
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9000, 1, 1, tzinfo=UTC)
# How far ahead of traceviz's clock a producer's may run (a job started "tomorrow" by its clock).
PRODUCER_CLOCK_AHEAD = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Window:
    """[start, end) of the dashboard, its bucket size and the provider/model filter."""

    key: str
    start: datetime
    end: datetime
    bucket: str
    provider: str = ""
    model: str = ""

    @property
    def previous(self) -> "Window":
        span = self.end - self.start
        return Window(
            self.key, self.start - span, self.start, self.bucket, self.provider, self.model
        )

    def bucket_bounds(self, bucket_start: datetime) -> tuple[datetime, datetime]:
        """A bucket's [since, until), clipped to the window (first and last buckets are partial)."""
        return max(bucket_start, self.start), min(bucket_start + BUCKETS[self.bucket], self.end)

    def jobs(self):
        """Jobs started in the window (and that used the provider/model, when filtered)."""
        jobs = Job.objects.filter(started_at__gte=self.start, started_at__lt=self.end)
        return jobs.filter(self._used())

    def steps(self):
        """Steps of those jobs."""
        # A job's steps live in the day its first event arrived, which is not before it
        # started (less a day for a producer's clock running ahead): on PostgreSQL this
        # leaves the older day partitions unread.
        first_day = (self.start - PRODUCER_CLOCK_AHEAD).astimezone(UTC).date()
        steps = Step.objects.filter(partition_day__gte=first_day)
        if self.provider or self.model:
            # The jobs are found first, each looked up once: a condition on the steps looked
            # each job up once per step.
            return steps.filter(job__in=self.jobs())
        return steps.filter(job__started_at__gte=self.start, job__started_at__lt=self.end)

    def plan(self, refresh_hours: int = rollup.REQUEST_REFRESH_HOURS) -> rollup.Plan:
        """Which hours of the window the rollup answers (refreshing at most ``refresh_hours``
        dirty ones; the others are read raw)."""
        return rollup.plan(self.start, self.end, refresh_hours)

    def cells(self, plan: rollup.Plan | None, *kinds: str) -> list[rollup.Cell]:
        return rollup.cells(plan or self.plan(), kinds, self.provider, self.model)

    def bucket_of(self, hour: datetime) -> datetime:
        """The bucket (hour or UTC day) of a rollup hour."""
        return hour.replace(hour=0) if self.bucket == "day" else hour

    def _used(self) -> Q:
        """The jobs that used the filter's provider and model (``that_used``, as the jobs list
        and the rollup's scopes mean it)."""
        found = Q()
        for name, value in (("provider", self.provider), ("model", self.model)):
            if value:
                found &= that_used(name, value)
        return found


def bucket_for(span: timedelta) -> str:
    if span <= timedelta(hours=3):
        return "minute"
    if span <= timedelta(days=3):
        return "hour"
    return "day"


def parse_window(params, now: datetime | None = None) -> tuple[Window, list[str]]:
    """The window the query string asks for (``range`` 1h, 24h, 7d, each starting on its
    bucket's boundary (``preset_start``), or custom with ISO ``since``/``until``, taken as
    given; ``provider``, ``model``); errors fall back to the last 24 hours."""
    now = now or timezone.now()
    errors: list[str] = []
    key = params.get("range") or DEFAULT_RANGE
    provider = params.get("provider", "").strip()[:200]
    model = params.get("model", "").strip()[:200]
    if "\x00" in provider + model:
        # No stored name holds NUL (ingest refuses it) and PostgreSQL cannot compare with one.
        errors.append("Provider and model must not contain NUL characters.")
        provider, model = provider.replace("\x00", ""), model.replace("\x00", "")
    if key == "custom":
        since, until = _parse_time(params.get("since")), _parse_time(params.get("until")) or now
        if not all(MIN_TIME <= moment < MAX_TIME for moment in (since or now, until)):
            errors.append("A custom range must fall between the years 1970 and 8999.")
        elif since is None:
            errors.append("A custom range needs a start (since), as an ISO date and time.")
        elif since >= until:
            errors.append("The custom range must start before it ends.")
        elif until - since > MAX_CUSTOM_RANGE:
            errors.append("A custom range can span at most 92 days.")
        else:
            return Window(key, since, until, bucket_for(until - since), provider, model), errors
        key = DEFAULT_RANGE
    elif key not in RANGES:
        errors.append(f"Unknown range {key!r}: showing the last 24 hours.")
        key = DEFAULT_RANGE
    span = RANGES[key]
    return Window(
        key, preset_start(now - span, key), now, bucket_for(span), provider, model
    ), errors


def preset_start(moment: datetime, key: str) -> datetime:
    """Where a preset range starting at ``moment`` starts: on the boundary of its bucket before
    it (1h: the minute, 24h: the UTC hour, 7d: the UTC day), so its first bar is whole like
    every bar but the current one, and the rollup answers all of it but the current hour from
    its hour and compiled day rows (an exact start reads its first partial hour raw and its
    first partial day hour by hour)."""
    bucket = bucket_for(RANGES[key])
    if bucket == "minute":
        return moment.replace(second=0, microsecond=0)
    return spans.day_floor(moment) if bucket == "day" else hour_floor(moment)


def _parse_time(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.strip().replace(" ", "+"))
        value = value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
        value.astimezone(UTC)  # an offset can carry it past the calendar's edge
    except (ValueError, OverflowError):
        return None
    return value


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def wall(value: datetime) -> str:
    """A time as plotly draws it: wall-clock time in the current (display) time zone, no
    offset (plotly ignores offsets); the axis title names the zone."""
    return timezone.localtime(value).strftime("%Y-%m-%dT%H:%M:%S")


def zone_label() -> str:
    offset = timezone.localtime().strftime("%z")
    return f"{timezone.get_current_timezone_name()}, UTC{offset[:3]}:{offset[3:]}"


# A provider or model filter of this value lists the jobs that name none (a chart's "(none)").
UNSET = "(none)"


def jobs_url(
    window: Window, since: datetime | None = None, until: datetime | None = None, **filters
) -> str:
    """The jobs list (``/``) filtered to the jobs a chart element counts (jobs.filters names).

    Without a status filter the list shows only jobs needing attention; ``show=all`` lifts that.
    """
    params: list[tuple[str, str]] = []
    statuses = filters.pop("status", ())
    if isinstance(statuses, str):
        statuses = (statuses,)
    if not statuses:
        params.append(("show", "all"))
    params.extend(("status", str(status)) for status in statuses)
    params.extend((name, str(value)) for name, value in filters.items() if value)
    for name in ("provider", "model"):
        if getattr(window, name) and name not in filters:
            params.append((name, getattr(window, name)))
    params.append(("since", iso(since or window.start)))
    params.append(("until", iso(until or window.end)))
    return "/?" + urlencode(params)
