"""The job page (GET /jobs/<job_id>/[?step=node:attempt]): header, resume preview, waterfall,
step list, narrative and the step detail panel (docs/architecture.md).

One view serves the whole page and, on an HTMX request that is not a history restore, the
partial that request swaps (the step panel, or the next window of a long list). The panel's
context comes from ``step_panel``. It reads rows and calls the taxonomy and layout helpers; it
never replays or classifies by itself.
"""

from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.contract.events import Event as ReplayEvent
from jobs.contract.events import order_key
from jobs.models import Job, Step, next_attempts
from jobs.replay import failures
from jobs.replay.state import completed_node_ids, root_failure_of
from jobs.web import (
    access,
    job_header,
    narrative,
    overview,
    span_panel,
    step_list,
    step_panel,
    timeline,
)
from jobs.web.access import get_job_for_user
from jobs.web.rendering import (
    display_zone,
    in_display_time_zone,
    link_step_key,
    parse_step_key,
    step_query,
    wants_fragment,
)

ROWS_WINDOW = step_list.ROWS_WINDOW
MAX_ROWS_WINDOW = 20_000
# Step columns the waterfall and step list read: not the payloads or the (long) reasons.
STEP_LIST_FIELDS = (
    "node_id",
    "attempt",
    "position",
    "result_type",
    "segment",
    "ignored_stale",
    "compensated",
    "started_at",
    "finished_at",
    "duration_ms",
    "trace_span_id",
    "parent_span_id",
    "completes",
)
TIMESTAMP_FIELDS = ("started_at", "finished_at")
# The page shows none of these JSON columns (the fold snapshot, the list's segment strip: a
# 10,000-step job's are 10,000 entries each), so it does not parse them.
JOB_PAGE_JOBS = Job.objects.defer("fold", "segment_strip", "payload_results")
MORE_PARTS = {"steps": "step-rows", "waterfall": "waterfall-rows", "narrative": "narrative-rows"}
# Waterfall rows kept above the selected step's node when the waterfall opens around it: few,
# so the node is inside the waterfall's own scroll box without scrolling it.
WATERFALL_ROWS_BEFORE = 5
# Subtrees a URL may collapse at once (``collapse=<node>``, repeated); more are left open.
MAX_COLLAPSED = 100


@dataclass(slots=True)
class StepRow:
    """The few columns of a step the waterfall and the step list show: a plain row, so a job of
    5,000 steps does not build 5,000 model instances."""

    node_id: str
    attempt: int
    position: int
    result_type: str
    segment: str
    ignored_stale: bool
    compensated: bool
    started_at: object
    finished_at: object
    duration_ms: float | None
    trace_span_id: str
    parent_span_id: str
    completes: int | None

    @property
    def step_key(self) -> str:
        return f"{self.node_id}:{self.attempt}"


def _moment(text: str | None) -> datetime | None:
    """A timestamp read as text (see ``_step_rows``); the database's own text form is ISO
    8601, with an offset on PostgreSQL and in UTC without one on SQLite."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _step_rows(steps) -> list[StepRow]:
    """Rows of ``steps``, a QuerySet already in the order (and slice) the caller wants.

    The two timestamps come as text and are parsed here: the driver's timestamp loader took
    two thirds of a 10,000-step job page (20,000 values), ``fromisoformat`` a tenth of that."""
    fields = [name if name not in TIMESTAMP_FIELDS else f"{name}_text" for name in STEP_LIST_FIELDS]
    rows = steps.annotate(
        **{f"{name}_text": Cast(name, TextField()) for name in TIMESTAMP_FIELDS}
    ).values_list(*fields)
    return [
        StepRow(n, a, p, rt, seg, stale, comp, _moment(s), _moment(f), d, span, parent, done)
        for n, a, p, rt, seg, stale, comp, s, f, d, span, parent, done in rows
    ]


# Rows of the long lists go to the template as dicts with their strings made here: Django
# resolves ``row.x`` on a dict with one lookup, where an object costs a failed dict lookup first,
# and a 5,000-step job renders hundreds of these rows.


def _step_item(step: Step | StepRow, root_key: str) -> dict:
    key = step.step_key
    stale = " stale" if step.ignored_stale else ""
    return {
        "key": key,
        "link_key": link_step_key(key),
        "href": "?" + step_query(step.node_id, step.attempt),
        "segment": step.segment,
        "css": f"seg-word seg-{step.segment}{stale}",
        "name": f"Node {step.node_id} · "
        + (step.result_type or ("running" if not step.finished_at else "success")),
        "attempt": step.attempt,
        "stale": step.ignored_stale,
        "compensated": step.compensated,
        "root": key == root_key,
    }


def _root_failure(job: Job) -> Step | None:
    """The root failure's Step row (``root_failure_of`` over the failing node's attempts), for
    a request that did not read every step's row."""
    if not job.failing_node_id:
        return None
    attempts = (
        job.own_steps()
        .filter(node_id=job.failing_node_id)
        .select_related("failure_group")
        .only(
            "node_id",
            "attempt",
            "position",
            "result_type",
            "ignored_stale",
            "finished_event_id",
            "failure_group",
        )
    )
    return root_failure_of(job.failing_node_id, attempts)


def _root_key(job: Job, steps: list[StepRow]) -> str:
    """``_root_failure``'s step key read off the job's rows (no query); "" when none."""
    root = root_failure_of(job.failing_node_id, steps)
    return root.step_key if root else ""


EVENT_COLUMNS = ("type", "job_id", "event_id", "ts", "seq", "payload", "attempt")


def _events_in_order(job: Job, start: int, stop: int) -> list[ReplayEvent]:
    """The job's events ``start:stop`` in event order (docs/contract.md). When they are all
    of its events (most jobs) they are read unordered and sorted here by ``order_key``, the
    order ``in_event_order`` writes in SQL, whose CASE costs a small page more to compile than
    the sort."""
    if start == 0 and job.event_count <= stop:
        rows = sorted(
            job.own_events().values_list(*EVENT_COLUMNS),
            key=lambda row: order_key(row[3], row[4], row[0], row[6], row[2]),
        )[:stop]
    else:
        rows = list(job.own_events().in_event_order()[start:stop].values_list(*EVENT_COLUMNS))
    return [ReplayEvent(*row[:6]) for row in rows]


def _narrative(job: Job, root: Step | None, stale_steps, events: list, start: int):
    """Narrative lines of ``events``, the job's events from ``start`` on in event order."""
    after_root = False
    root_event_id = root.finished_event_id if root else ""
    if root_event_id and start and events:
        root_event = job.own_events().filter(event_id=root_event_id).first()
        first = events[0]
        after_root = root_event is not None and order_key(
            root_event.ts, root_event.seq, root_event.type, root_event.attempt, root_event.event_id
        ) < order_key(first.ts, first.seq, first.type, first.attempt, first.event_id)
    span_ids = [e.payload.get("span_id") for e in events if e.type == "span"]
    log_span_ids = [e.payload.get("span_id") for e in events if e.type == "log"]
    span_steps = span_panel.steps_of_spans(job, job.own_steps(), span_ids, log_span_ids)
    return narrative.lines_for(
        events,
        root_event_id=root_event_id,
        after_root=after_root,
        stale_steps=stale_steps,
        span_steps=span_steps,
    )


def _window(request, name: str = "rows") -> int:
    """Rows a long list shows: ``name`` (a live poll's count of one list) else ``rows`` (the
    no-JS "show more" page's count)."""
    try:
        rows = int(request.GET.get(name) or request.GET.get("rows") or ROWS_WINDOW)
    except ValueError:
        rows = ROWS_WINDOW
    return min(max(rows, ROWS_WINDOW), MAX_ROWS_WINDOW)


def _finding_links(finding: dict) -> dict:
    """A finding with the step links of the attempts it names."""
    node_id = finding.get("node_id")
    attempts = finding.get("attempts") or []
    links = [
        {"attempt": attempt, "query": step_query(node_id, attempt)}
        for attempt in attempts
        if node_id and isinstance(attempt, int)
    ]
    return {**finding, "links": links}


def _more_from(request) -> int:
    return step_list.parse_offset(request.GET.get("from")) or 0


def rows_url(job: Job, part: str) -> str:
    """The URL of a window of one of the job page's long lists (``job_rows``)."""
    return reverse("jobs:job-rows", args=[job.job_id, part])


def _more_links(job: Job, part: str, end: int, total: int, step_key: str) -> dict:
    """Where "show more" fetches the next rows (HTMX) and the no-JS page with a larger window."""
    if end >= total:
        return {}
    parsed = parse_step_key(step_key) if step_key else None
    keep = step_query(*parsed) + "&" if parsed else ""
    return {
        "fragment": rows_url(job, part) + "?" + keep + urlencode({"from": str(end)}),
        "page": "?" + keep + urlencode({"rows": end + ROWS_WINDOW}) + f"#{part}",
        "remaining": total - end,
    }


def _listed_steps(request, job: Job, all_steps: list[StepRow] | None):
    """The filter the URL asks for, its form, and the rows it keeps in position order
    (``all_steps`` when it keeps every row and the caller has them)."""
    step_filter, filter_form = step_list.parse_filter(request.GET)
    if step_filter.active:
        listed = _step_rows(step_filter.apply(job.own_steps()).order_by("position"))
    elif all_steps is not None:
        listed = all_steps
    else:
        listed = _step_rows(job.own_steps().order_by("position"))
    return step_filter, filter_form, listed


def _step_window(
    request,
    job: Job,
    all_steps: list[StepRow] | None,
    selected_key: str,
    raw_step: str,
    selected_position: int | None = None,
    filtered=None,
):
    """The step list's rows (filtered, windowed around the selected step, or where it would
    be when the filter leaves it out: ``selected_position``) and its links; ``all_steps`` are
    the job's rows when the caller has them (None: read them if needed), ``filtered`` what
    ``_listed_steps`` answered when the caller has asked it."""
    step_filter, filter_form, listed = filtered or _listed_steps(request, job, all_steps)
    selected = parse_step_key(selected_key) if selected_key else None
    index = (
        next(
            (
                i
                for i, s in enumerate(listed)
                if s.attempt == selected[1] and s.node_id == selected[0]
            ),
            None,
        )
        if selected
        else None
    )
    if index is None and selected_position is not None and listed:
        # The selected step is filtered out: the list opens where it would be.
        index = min(bisect_left([s.position for s in listed], selected_position), len(listed) - 1)
    size = _window(request)
    first = step_list.parse_offset(request.GET.get("first"))
    start = step_list.window_start(len(listed), index, first, size)
    end = min(start + size, len(listed))
    keep = [("step", raw_step)] if raw_step else []
    links = step_list.window_links(
        start, end, len(listed), keep, step_filter, rows_url(job, "steps")
    )
    return {
        "step_rows": listed[start:end],
        "first_index": start,
        "steps_before": links.before,
        "steps_more": links.after,
        "listed_count": len(listed),
        "step_filter": step_filter,
        "filter_form": filter_form,
        "selected_step": raw_step,
    }


def _collapsed(request) -> frozenset[str]:
    """The nodes whose subtrees the URL collapses (``collapse``, repeated), at most
    MAX_COLLAPSED of them."""
    names = [name for name in request.GET.getlist("collapse") if name][:MAX_COLLAPSED]
    return frozenset(names)


def _waterfall_links(
    keep: list[tuple[str, str]], start: int, end: int, total: int, fragment_url: str
) -> dict:
    """Where the waterfall's rows before ``start`` and from ``end`` on come from: an HTMX
    fragment URL and a no-JS page URL each (as ``step_list.window_links``)."""
    links: dict = {"before": {}, "after": {}}
    if start > 0:
        earlier = max(start - ROWS_WINDOW, 0)
        links["before"] = {
            "fragment": fragment_url + "?" + urlencode([*keep, ("from", earlier), ("to", start)]),
            "page": "?"
            + urlencode([*keep, ("wf_first", earlier), ("wf_rows", end - earlier)])
            + "#waterfall",
            "remaining": start,
        }
    if end < total:
        links["after"] = {
            "fragment": fragment_url + "?" + urlencode([*keep, ("from", end)]),
            "page": "?"
            + urlencode([*keep, ("wf_first", start), ("wf_rows", end - start + ROWS_WINDOW)])
            + "#waterfall",
            "remaining": total - end,
        }
    return links


def _waterfall_items(
    rows, keep, collapsed: frozenset[str], selected_node: str, first_offset: int
) -> list[dict]:
    """Waterfall rows as the template shows them, each parent's toggle linking to the same
    page with its subtree collapsed (or opened again), each carrying its offset among the
    listed rows (a live refresh sends the first one back, so the rows shown stay)."""
    items = []
    for offset, row in enumerate(rows, start=first_offset):
        toggle = ""
        if row.descendants:
            now_collapsed = sorted(collapsed ^ {row.node_id})
            toggle = "?" + urlencode([*keep, *(("collapse", name) for name in now_collapsed)])
        item = timeline.waterfall_item(row, toggle, selected_node)
        item["offset"] = offset
        items.append(item)
    return items


def _navigation(request, job: Job, steps: list[StepRow], selected_key: str, raw_step: str):
    """The overview strip, the waterfall and the step list, each opened around the selected
    step (the root failure by default): the waterfall lists the nodes the step filter keeps,
    without the subtrees the URL collapses; the strip shows every node, its window outlined.
    ``steps``: every row of the job, in position order."""
    filtered = _listed_steps(request, job, steps)
    step_filter, _form, listed_steps = filtered
    tree = timeline.node_tree(steps)
    collapsed = _collapsed(request)
    shown = {row.node_id for row in listed_steps} if step_filter.active else None
    places = tree.rows(shown, collapsed)
    selected = parse_step_key(selected_key) if selected_key else None
    selected_place = tree.index.get(selected[0]) if selected else None
    selected_row = None
    if selected_place is not None and places:
        selected_row = min(bisect_left(places, selected_place), len(places) - 1)
    size = _window(request, "wf_rows")
    first = step_list.parse_offset(request.GET.get("wf_first"))
    if first is None and selected_row is not None and selected_row >= size:
        start = max(selected_row - WATERFALL_ROWS_BEFORE, 0)
    else:
        start = step_list.window_start(len(places), None, first, size)
    end = min(start + size, len(places))
    waterfall = timeline.waterfall(
        steps,
        now=job.last_event_at,
        start=start,
        stop=end,
        tree=tree,
        listed=places,
        collapsed=collapsed,
    )
    filter_keep = step_filter.query_items()
    collapse_keep = [("collapse", name) for name in sorted(collapsed)]
    step_keep = [("step", raw_step)] if raw_step else []
    keep = step_keep + filter_keep + collapse_keep
    links = _waterfall_links(keep, start, end, len(places), rows_url(job, "waterfall"))
    shown_first = places[start] if end > start else -1
    shown_last = places[end - 1] if end > start else -1
    root_key = _root_key(job, steps)
    strip = overview.overview(tree, root_key)
    strip_keep = urlencode(filter_keep + collapse_keep)
    selected_position = (
        next(
            (r.position for r in tree.by_node.get(selected[0], ()) if r.attempt == selected[1]),
            None,
        )
        if selected
        else None
    )
    listing = _step_window(request, job, steps, selected_key, raw_step, selected_position, filtered)
    return {
        **listing,
        "waterfall": waterfall,
        "waterfall_rows": _waterfall_items(
            waterfall.rows,
            step_keep + filter_keep,
            collapsed,
            selected[0] if selected else "",
            start,
        ),
        "waterfall_more": links["after"],
        "waterfall_before": links["before"],
        "waterfall_first": start,
        "waterfall_total": len(tree.order),
        "collapsed_count": len(collapsed & set(tree.index)),
        "strip": strip,
        "strip_cells": overview.cell_items(
            strip, tree, shown_first, shown_last, "&" + strip_keep if strip_keep else ""
        ),
        "strip_outline": overview.outline(strip, shown_first, shown_last),
        "strip_shown": (
            f"{start + 1:,} to {end:,} of {len(places):,} listed nodes" if end > start else ""
        ),
    }


@require_GET
@login_required
@access.follows_job_aliases("jobs:job")
@vary_on_headers("HX-Request")
@in_display_time_zone
def job_detail(request, job_id: str):
    """GET /jobs/<job_id>/[?step=node:attempt][&node=&segment=&retried=1]: header, resume
    preview, waterfall, step list (filtered by node name, segment, attempt > 1), narrative and
    the step detail panel; on a job with a root failure its panel is open by default.

    An HTMX request that is not a history restore gets the partial its target names: the step
    list (a filter), the waterfall (a move) or the step panel. A filter with an invalid value
    answers 400 with the form's error. The long lists' next rows and a live job's poll have
    URLs of their own (``job_rows``, ``job_live``); their old query strings here (``more=``,
    ``live=1``) redirect there, so a page loaded before keeps working."""
    if request.GET.get("live") == "1" or request.GET.get("more") in MORE_PARTS:
        return _to_own_url(request, job_id)
    job = get_job_for_user(request, job_id, jobs=JOB_PAGE_JOBS)
    raw_step = request.GET.get("step", "")
    fragment = wants_fragment(request)
    moves = fragment and request.htmx.target in MOVED_PARTS
    if fragment and not moves:
        return _fragment(request, job, raw_step)
    # The whole page reads every step's row for the waterfall: the root failure is read off
    # them, and its Step row comes with the panel when the panel shows it (the default).
    steps = _step_rows(job.own_steps().order_by("position"))
    root_key = _root_key(job, steps)
    if moves:
        return _moved(request, job, steps, root_key, raw_step)
    context, status = _page_context(request, job, steps, root_key, raw_step)
    return render(request, "jobs/detail.html", context, status=status)


@require_GET
@login_required
@access.follows_job_aliases("jobs:job")
@vary_on_headers("HX-Request")
@in_display_time_zone
def job_live(request, job_id: str):
    """GET /jobs/<job_id>/live: a live job page's poll. Every part that events change, out of
    band, keeping the reader's step, filter and opened rows (``first``, ``rows``, ``wf_rows``,
    ``lines``, which traceviz.js sends); once the job stops expecting events it answers 286,
    htmx's "stop polling". Without HTMX it is the job page."""
    job = get_job_for_user(request, job_id, jobs=JOB_PAGE_JOBS)  # 403/404 before a redirect
    if not wants_fragment(request):
        return redirect(_job_url(job_id, request.GET, drop=("from", "to")))
    steps = _step_rows(job.own_steps().order_by("position"))
    root_key = _root_key(job, steps)
    context, _status = _page_context(request, job, steps, root_key, request.GET.get("step", ""))
    context["oob"] = True
    return render(request, "jobs/live.html", context, status=200 if context["live"] else 286)


@require_GET
@login_required
@access.follows_job_aliases("jobs:job")
@vary_on_headers("HX-Request")
@in_display_time_zone
def job_rows(request, job_id: str, part: str):
    """GET /jobs/<job_id>/rows/<steps|waterfall|narrative>?from=N[&to=M]: the next (or, with
    ``to``, the earlier) window of one of the job page's long lists, as the partial that
    replaces its "show more" item. Without HTMX it is the job page, with the list's window
    from ``from`` on."""
    job = get_job_for_user(request, job_id, jobs=JOB_PAGE_JOBS)  # 403/404 before a redirect
    if not wants_fragment(request):
        return redirect(_rows_page_url(job_id, part, request.GET))
    return _more_rows(request, job, part, request.GET.get("step", ""))


# The job page's query parameter that opens each long list from a row (its no-JS window).
FIRST_ROW = {"steps": "first", "waterfall": "wf_first", "narrative": ""}


def _job_url(job_id: str, query, drop: tuple[str, ...] = ()) -> str:
    params = query.copy()
    for name in ("live", "more", *drop):
        params.pop(name, None)
    encoded = params.urlencode(safe=":")  # step keys read as the page writes them
    return reverse("jobs:job", args=[job_id]) + (f"?{encoded}" if encoded else "")


def _rows_page_url(job_id: str, part: str, query) -> str:
    """The job page showing ``part``'s window from the row a rows URL starts at."""
    params = query.copy()
    start = params.pop("from", [""])[-1]
    params.pop("to", None)
    if FIRST_ROW[part] and start:
        params[FIRST_ROW[part]] = start
    return _job_url(job_id, params) + f"#{part}"


def _to_own_url(request, job_id: str):
    """An old link's query string (``more=<part>``, ``live=1``) sent to the view that serves it
    now; the request's other parameters kept. HTMX follows the redirect with its headers."""
    params = request.GET.copy()
    part = params.pop("more", [""])[-1]
    params.pop("live", None)
    url = (
        reverse("jobs:job-rows", args=[job_id, part])
        if part in MORE_PARTS
        else reverse("jobs:job-live", args=[job_id])
    )
    encoded = params.urlencode(safe=":")  # step keys read as the page writes them
    return redirect(url + (f"?{encoded}" if encoded else ""))


def _page_context(
    request, job: Job, steps: list[StepRow], root_key: str, raw_step: str
) -> tuple[dict, int]:
    """The whole page's context (the page and its live poll render the same parts) and the
    HTTP status (400 for a filter with an invalid value, 404 for a step the job lacks)."""
    lines_window = _window(request, "lines")
    events = _events_in_order(job, 0, lines_window)
    # The window holds every event of most jobs: the panel's raw events are among them.
    every_event = events if len(events) == job.event_count <= lines_window else None
    panel, status = step_panel.panel_context(
        request, job, raw_step or root_key, root_key, every_event
    )
    root = next((e.step for e in panel.get("attempts", []) if e.key == root_key), None)
    if root_key and root is None:
        root = _root_failure(job)
    panel["job"] = job
    panel["can_see_raw"] = access.can_see_raw_events(request.user)
    current_key = panel.get("step_key", "")
    listing = _navigation(request, job, steps, current_key, raw_step)
    if listing["filter_form"].errors:
        status = 400
    listing["step_rows"] = _indexed(
        listing["step_rows"], root_key, listing["first_index"], listing["step_filter"]
    )
    stale_steps = {(s.node_id, s.attempt) for s in steps if s.ignored_stale}
    lines = _narrative(job, root, stale_steps, events, 0)
    runs = (
        Q(retry_of=job.job_id) | Q(job_id=job.retry_of) if job.retry_of else Q(retry_of=job.job_id)
    )
    related = list(
        Job.objects.filter(runs)
        .only("job_id", "status", "retry_of", "started_at")
        .order_by("started_at", "id")
    )
    end = job.finished_at or job.last_event_at
    next_attempt = next_attempts([job]).get(job.pk)
    completed = completed_node_ids(steps)
    resume = timeline.resume_preview(completed, steps)
    context = {
        **panel,
        **listing,
        "nav": "jobs",
        "job": job,
        "display_zone": display_zone(),
        "job_cost": span_panel.format_cost(job.cost),
        "job_duration": narrative.format_duration_ms(
            (end - job.started_at).total_seconds() * 1000 if end and job.started_at else None
        ),
        **job_header.finish_words(job),
        "stalled": job.is_stalled,
        "waiting_to_retry": job.status == failures.RunStatus.PAUSED_TRANSIENT,
        "next_attempt": next_attempt,
        "next_attempt_words": job_header.next_attempt_words(next_attempt, timezone.now()),
        "unshown": job_header.unshown(job),
        "previous_run": next((j for j in related if j.job_id == job.retry_of), None),
        "next_runs": [j for j in related if j.retry_of == job.job_id],
        "escalations": list(job.escalations.order_by("created_at", "pk")),
        "completed_nodes": job_header.collapsible(completed),
        "metadata": job_header.metadata_items(job.metadata),
        "resume": resume,
        "resume_skip": job_header.collapsible(resume.skip),
        "findings": [_finding_links(finding) for finding in job.findings],
        "planner_attempts": job_header.planner_attempts(job.own_events())
        if job.last_validation_error
        else [],
        "step_count": len(steps),
        "narrative_lines": [narrative.line_item(line) for line in lines],
        "narrative_more": _more_links(job, "narrative", lines_window, job.event_count, raw_step),
        "narrative_count": job.event_count,
        "root_key": root_key,
        "root_query": step_query(root.node_id, root.attempt) if root else "",
        "root_group": root.failure_group if root else None,
        "current_step_key": current_key,
        "compare_query": urlencode({"a": job.job_id}),
        "workflow_query": urlencode({"show": "all", "workflow": job.workflow}),
        "live": job_header.is_live(job),
        "live_seconds": job_header.poll_seconds(job),
    }
    return context, status


# HTMX targets whose request moves the waterfall and the step list: a click on the overview
# strip, "Jump to root failure" or a subtree's toggle (target the waterfall, the step list and
# panel follow out of band), and the step filter (target the step list, the waterfall follows).
MOVED_PARTS = {"waterfall": "jobs/moved.html", "step-results": "jobs/filtered.html"}


def _moved(request, job: Job, steps: list[StepRow], root_key: str, raw_step: str):
    """The parts a move changes, for an HTMX request that targets one of MOVED_PARTS."""
    target = request.htmx.target
    if target == "waterfall":
        panel, status = step_panel.panel_context(request, job, raw_step or root_key, root_key)
        panel["can_see_raw"] = access.can_see_raw_events(request.user)
        selected_key = panel.get("step_key", "")
    else:
        parsed = parse_step_key(raw_step) if raw_step else None
        panel, status = {}, 200
        selected_key = raw_step if parsed else root_key
    listing = _navigation(request, job, steps, selected_key, raw_step)
    if listing["filter_form"].errors:
        status = 400
    listing["step_rows"] = _indexed(
        listing["step_rows"], root_key, listing["first_index"], listing["step_filter"]
    )
    context = {
        **panel,
        **listing,
        "job": job,
        "root_key": root_key,
        "current_step_key": selected_key,
        "step_count": len(steps),
    }
    return render(request, MOVED_PARTS[target], context, status=status)


def _fragment(request, job: Job, raw_step: str):
    """The step panel of an HTMX request: it needs no other step's row, so the root failure
    is one query."""
    root = _root_failure(job)
    root_key = root.step_key if root else ""
    panel, status = step_panel.panel_context(request, job, raw_step or root_key, root_key)
    panel["job"] = job
    panel["can_see_raw"] = access.can_see_raw_events(request.user)
    return render(request, "jobs/detail.html#step-panel", panel, status=status)


def _indexed(
    rows: list[StepRow], root_key: str, first_index: int, step_filter: step_list.StepFilter
) -> list[dict]:
    """Step list items carrying their offset in the (filtered) list (a live refresh sends the
    first one and the count back, so the rows the reader has opened stay) and links that keep
    the filter (a reload shows the same list)."""
    items = [_step_item(row, root_key) for row in rows]
    keep = "&" + urlencode(step_filter.query_items()) if step_filter.active else ""
    for offset, item in enumerate(items):
        item["index"] = first_index + offset
        item["href"] += keep
    return items


def _more_rows(request, job: Job, part: str, raw_step: str):
    """The next (or, for the step list, the earlier) window of one of the long lists, as the
    partial that replaces its "show more" item."""
    start = _more_from(request)
    stop = start + ROWS_WINDOW
    root = _root_failure(job)
    root_key = root.step_key if root else ""
    current_key = step_panel.resolve_step_key(job, raw_step) if raw_step else root_key
    context: dict = {"job": job, "current_step_key": current_key, "root_key": root_key}
    if part == "steps":
        step_filter, _form = step_list.parse_filter(request.GET)
        listed = step_filter.apply(job.own_steps()).order_by("position")
        total = listed.count()
        to = step_list.parse_offset(request.GET.get("to"))
        earlier = to is not None and start < to
        stop = min(to, start + MAX_ROWS_WINDOW) if earlier and to is not None else stop
        steps = _step_rows(listed[start:stop])
        context["step_rows"] = _indexed(steps, root_key, start, step_filter)
        keep = [("step", raw_step)] if raw_step else []
        links = step_list.window_links(
            start, stop, total, keep, step_filter, rows_url(job, "steps")
        )
        context["steps_before"] = links.before if earlier else {}
        context["steps_more"] = {} if earlier else links.after
    elif part == "waterfall":
        steps = _step_rows(job.own_steps().order_by("position"))
        step_filter, _form, listed = _listed_steps(request, job, steps)
        tree = timeline.node_tree(steps)
        collapsed = _collapsed(request)
        places = tree.rows({r.node_id for r in listed} if step_filter.active else None, collapsed)
        to = step_list.parse_offset(request.GET.get("to"))
        earlier = to is not None and start < to
        if to is not None and earlier:
            stop = min(to, start + MAX_ROWS_WINDOW)
        waterfall = timeline.waterfall(
            steps,
            now=job.last_event_at,
            start=start,
            stop=stop,
            tree=tree,
            listed=places,
            collapsed=collapsed,
        )
        keep = [("step", raw_step)] if raw_step else []
        keep += step_filter.query_items()
        selected = parse_step_key(raw_step or root_key)
        context["waterfall_rows"] = _waterfall_items(
            waterfall.rows, keep, collapsed, selected[0] if selected else "", start
        )
        keep += [("collapse", n) for n in sorted(collapsed)]
        around = _waterfall_links(
            keep, start, min(stop, len(places)), len(places), rows_url(job, "waterfall")
        )
        context["waterfall_before"] = around["before"] if earlier else {}
        context["waterfall_more"] = {} if earlier else around["after"]
    else:
        stale = set(job.own_steps().filter(ignored_stale=True).values_list("node_id", "attempt"))
        lines = _narrative(job, root, stale, _events_in_order(job, start, stop), start)
        context["narrative_lines"] = [narrative.line_item(line) for line in lines]
        context["narrative_more"] = _more_links(job, part, stop, job.event_count, raw_step)
    return render(request, f"jobs/detail.html#{MORE_PARTS[part]}", context)
