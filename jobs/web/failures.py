"""Failure groups (GET /failures/, /failures/<fingerprint>/): failures grouped by signature
(docs/failures.md), read from the rows ingest keeps, and their lifecycle actions (POST
/failures/<fingerprint>/<action>/). Every role reads and acts.

The list is ``FailureGroupQuerySet.matching`` of the filter form, in keyset pages; one view
serves the page and, for htmx, the ``group-table`` partial its filters swap."""

from django import forms
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from jobs.dashboard import failure_groups
from jobs.dashboard.window import iso, parse_window, zone_label
from jobs.escalations import group_lifecycle
from jobs.ingest import database
from jobs.ingest import failure_groups as grouping
from jobs.models import FailureGroup
from jobs.templatetags.traceviz import stamp
from jobs.web import access
from jobs.web.dashboard import RANGE_CHOICES
from jobs.web.failure_filters import (
    DEFAULT_SORT,
    IGNORE_FOR,
    IGNORE_FOR_CHOICES,
    SORT_CHOICES,
    STATUS_CHOICES,
    GroupFilterForm,
    IgnoreForm,
    MergeForm,
    ResolveForm,
    decode_cursor,
    encode_cursor,
)
from jobs.web.rendering import display_zone, in_display_time_zone, step_query, wants_fragment

PAGE_SIZE = 50
COUNT_CAP = 1000

RANGE_PRESETS = [(key, label) for key, label in RANGE_CHOICES if key != "custom"]


def _range_links(request, window) -> list[dict]:
    kept = {k: v for k, v in request.GET.items() if k not in ("range", "since", "until", "cursor")}
    return [
        {
            "key": key,
            "label": label,
            "url": "?" + urlencode({**kept, "range": key}),
            "current": window.key == key,
        }
        for key, label in RANGE_PRESETS
    ]


def group_jobs_url(group: FailureGroup) -> str:
    """The jobs list filtered to the group's jobs, whatever their status."""
    return "/?" + urlencode({"show": "all", "group": group.fingerprint})


def _seen(moment) -> dict:
    """A first/last seen time as the list shows it (minutes, display time zone)."""
    if moment is None:
        return {"iso": "", "text": ""}
    return {"iso": timezone.localtime(moment).isoformat(), "text": stamp(moment)[:16]}


def _list_item(
    row: failure_groups.GroupRow, range_key: str, counts: failure_groups.FailureCounts
) -> dict:
    """One row of the list with its strings made here: 50 rows of a dozen fields each are
    the page's main rendering cost (as on the job page, a dict resolves in one lookup)."""
    group = row.group
    shown = row.involved[:3]
    return {
        "counts": counts,
        "status": _status_label(group),
        "row": row,
        "group": group,
        "href": reverse("jobs:failure-group", args=[group.fingerprint]) + f"?range={range_key}",
        "jobs_url": group_jobs_url(group),
        "sparkline": row.sparkline,
        "spark_label": f"{row.steps_in_window} failures over the range, per {row.per}",
        "detail": " · ".join(
            [group.workflow or "(no workflow)"]
            + [part for part in (group.failure_code, group.error_type) if part]
        ),
        "first_seen": _seen(group.first_seen),
        "last_seen": _seen(group.last_seen),
        "providers": [f"{who.label} · {who.steps}" for who in shown],
        "more_providers": len(row.involved) - len(shown),
    }


def _status_label(group: FailureGroup) -> str:
    """The group's status as the pages show it: regressed is an unresolved group that was
    resolved and seen again."""
    return "regressed" if group.is_regressed else group.status


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def failure_group_list(request):
    """GET /failures/: the groups seen in the window that match the filters, a page at a
    time, most failures first unless sorted otherwise."""
    now = timezone.now()
    window, errors = parse_window(request.GET, now)
    form = GroupFilterForm(request.GET)
    form.is_valid()  # invalid fields are shown with their error and left out of the filter
    filters = {**form.cleaned_data, "since": window.start, "until": window.end}
    sort = filters.get("sort") or DEFAULT_SORT
    matching = FailureGroup.objects.matching(filters, now)
    listed = matching.sorted_by(sort)
    cursor = filters.get("cursor")
    if cursor:
        try:
            listed = listed.after(sort, *decode_cursor(cursor, sort))
        except ValueError as error:
            errors.append(f"Page: {error}")
            cursor = ""
    page = list(listed[: PAGE_SIZE + 1])
    query = request.GET.copy()
    query.pop("cursor", None)
    next_url = ""
    if len(page) > PAGE_SIZE:
        page = page[:PAGE_SIZE]
        query["cursor"] = encode_cursor(page[-1], sort)
        next_url = "?" + query.urlencode()
        del query["cursor"]
    counts = failure_groups.failure_counts([group.pk for group in page])
    rows = failure_groups.rows_for(window, page)
    total = database.capped_count(matching.order_by(), COUNT_CAP + 1)
    first_page = "?" + query.urlencode() if query else request.path
    template = "failures/list.html"
    if wants_fragment(request):
        template += "#group-table"
    context = {
        "nav": "failures",
        "form": form,
        "window": window,
        "errors": errors,
        "ranges": _range_links(request, window),
        "rows": [
            _list_item(row, window.key, counts.get(row.group.pk, failure_groups.FailureCounts()))
            for row in rows
        ],
        "total": min(total, COUNT_CAP),
        "total_more": total > COUNT_CAP,
        "status_choices": STATUS_CHOICES,
        "sort_choices": SORT_CHOICES,
        "status": filters.get("status") or "unresolved",
        "sort": sort,
        "next_page_url": next_url,
        "first_page_url": first_page if cursor else "",
        "since": iso(window.start),
        "until": iso(window.end),
        "zone": zone_label(),
        "display_zone": display_zone(),
    }
    return render(request, template, context)


def _get_group(fingerprint: str) -> FailureGroup:
    group = (
        FailureGroup.objects.select_related("example_job", "merged_into")
        .filter(fingerprint=fingerprint)
        .first()
    )
    if group is None:
        raise Http404("No failure group has this fingerprint.")
    return group


def _detail_context(request, group: FailureGroup, *, error: str = "") -> dict:
    now = timezone.now()
    window, errors = parse_window(request.GET, now)
    example = group.example_job
    node_id, _, attempt = group.example_step.rpartition(":")
    ended = request.GET.get("ended") == "on"
    can_act = access.can_act_on_failure_groups(request.user)
    return {
        "nav": "failures",
        "group": group,
        "status": _status_label(group),
        "window": window,
        "errors": errors,
        "error": error,
        "ranges": _range_links(request, window),
        "row": failure_groups.group_in_window(group, window),
        "trend": failure_groups.trend_figure(window, group),
        "jobs": list(failure_groups.recent_jobs(group)),
        "jobs_url": group_jobs_url(group),
        "example_url": (
            f"{reverse('jobs:job', args=[example.job_id])}?{step_query(node_id, int(attempt))}"
            if example is not None and attempt.isdigit()
            else ""
        ),
        "failures": failure_groups.group_failures(group, ended=ended),
        "counts": failure_groups.failure_counts([group.pk]).get(
            group.pk, failure_groups.FailureCounts()
        ),
        "ended_only": ended,
        "escalations": failure_groups.open_escalations(group),
        "entries": list(group.entries.all()),
        "can_act": can_act,
        "can_resolve": can_act and group_lifecycle.can_apply("resolve", group),
        "can_ignore": can_act and group_lifecycle.can_apply("ignore", group),
        "can_unresolve": can_act and group_lifecycle.can_apply("unresolve", group),
        "can_merge": can_act and group.status != FailureGroup.Status.MERGED,
        "ignore_choices": IGNORE_FOR_CHOICES,
        "zone": zone_label(),
        "display_zone": display_zone(),
    }


@require_GET
@access.role_required(access.can_view)
@in_display_time_zone
def failure_group_detail(request, fingerprint: str):
    group = _get_group(fingerprint)
    return render(request, "failures/detail.html", _detail_context(request, group))


ACTIONS = ("resolve", "ignore", "unresolve", "merge")


@require_POST
@access.role_required(access.can_act_on_failure_groups)
@in_display_time_zone
def failure_group_action(request, fingerprint: str, action: str):
    """POST /failures/<fingerprint>/<action>/: resolve (``in_version``, ``after``), ignore
    (``duration`` or ``count``), unresolve or merge (``into``: the surviving group's
    fingerprint). 303 back to the group's page (the survivor's, after a merge); a refused
    action is the page again with its reason (400)."""
    group = _get_group(fingerprint)
    if action not in ACTIONS:
        raise Http404("No such action.")
    target = group
    form: forms.Form
    try:
        if action == "resolve":
            form = ResolveForm(request.POST)
            if not form.is_valid():
                raise group_lifecycle.GroupActionError(_form_error(form))
            group_lifecycle.resolve(
                group,
                actor=request.user,
                in_version=form.cleaned_data["in_version"],
                after=form.cleaned_data["after"],
            )
        elif action == "ignore":
            form = IgnoreForm(request.POST)
            if not form.is_valid():
                raise group_lifecycle.GroupActionError(_form_error(form))
            duration = form.cleaned_data["duration"]
            group_lifecycle.ignore(
                group,
                actor=request.user,
                until=timezone.now() + IGNORE_FOR[duration] if duration else None,
                count=form.cleaned_data["count"],
            )
        elif action == "unresolve":
            group_lifecycle.unresolve(group, actor=request.user)
        else:
            form = MergeForm(request.POST)
            if not form.is_valid():
                raise group_lifecycle.GroupActionError(_form_error(form))
            found = FailureGroup.objects.filter(fingerprint=form.cleaned_data["into"]).first()
            if found is None:
                raise group_lifecycle.GroupActionError("No failure group has that fingerprint")
            grouping.merge(group, found, actor=request.user)
            target = found
    except group_lifecycle.GroupActionError as refused:
        group.refresh_from_db()
        context = _detail_context(request, group, error=str(refused))
        return render(request, "failures/detail.html", context, status=400)
    url = reverse("jobs:failure-group", args=[target.fingerprint])
    return HttpResponseRedirect(url, status=303)


def _form_error(form) -> str:
    return "; ".join(
        f"{form.fields[name].label or name}: {' '.join(messages)}"
        if name != "__all__"
        else " ".join(messages)
        for name, messages in form.errors.items()
    )
