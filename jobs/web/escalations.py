"""Escalation pages (docs/contract.md and docs/architecture.md): the support queue, one
escalation with its audit trail and notifications, and the actions.

Every role reads; only support (and staff) act, checked here on the server for every POST (403
otherwise), whatever the templates show. Each action calls one action function in
``jobs.escalations``, which writes the change and its audit entry together. The list and the
detail page render whole on a normal request and as a template partial on an HTMX request; an
action answers with the partial it was posted from (the queue row or the detail section).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django import forms
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.http import Http404, HttpResponseBadRequest, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from jobs.dashboard import failure_groups
from jobs.dashboard.window import iso
from jobs.escalations import actions, bulk, permissions
from jobs.models import (
    AlertEpisode,
    AlertRule,
    Escalation,
    EscalationEntry,
    Job,
    Step,
    next_attempts,
)
from jobs.replay.failures import RunStatus
from jobs.web import access
from jobs.web.access import get_escalation_for_user
from jobs.web.rendering import bounded_int, in_display_time_zone, step_query, wants_fragment

Status = Escalation.Status
PAGE_SIZE = 50
# Row ids are 64-bit: a longer number names no row.
MAX_ROW_ID = 2**63 - 1
# The queue's order within a status: the most severe first.
SEVERITY_ORDER = (
    Escalation.Severity.CRITICAL,
    Escalation.Severity.HIGH,
    Escalation.Severity.MEDIUM,
    Escalation.Severity.LOW,
)
# The most escalations one bulk action changes (a selection or "all matching the filters").
BULK_MAX = 1000
# How many of a preview's changes it lists by name (the rest are counted).
PREVIEW_LISTED = 50
RECOVERED_FILTERS = [("", "any"), ("yes", "job recovered"), ("no", "not recovered")]
STATUS_FILTERS = [
    ("active", "Unresolved"),
    ("open", "Open"),
    ("acknowledged", "Acknowledged"),
    ("resolved", "Resolved"),
    ("all", "All"),
]
STATUS_FILTER_VALUES = {
    "active": (Status.OPEN, Status.ACKNOWLEDGED),
    "open": (Status.OPEN,),
    "acknowledged": (Status.ACKNOWLEDGED,),
    "resolved": (Status.RESOLVED,),
}
SINCE_FILTERS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
SINCE_LABELS = [
    ("", "any time"),
    ("1h", "last hour"),
    ("24h", "last 24 hours"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
]
# Job columns the queue never shows: left in the database.
JOB_DEFERRED = (
    "job__metadata",
    "job__payload_results",
    "job__last_validation_error",
    "job__findings",
    "job__segment_strip",
    "job__finish_reason",
    "job__cancel_reason",
    "job__failing_reason",
    "job__fold",
)


class EscalationFilterForm(forms.Form):
    status = forms.ChoiceField(choices=STATUS_FILTERS, required=False)
    kind = forms.CharField(required=False, max_length=64)
    severity = forms.ChoiceField(
        choices=[("", "any"), *Escalation.Severity.choices], required=False
    )
    assignee = forms.CharField(
        required=False, max_length=150, help_text='"mine", "unassigned" or a username'
    )
    job = forms.CharField(required=False, max_length=200, label="Job id")
    since = forms.ChoiceField(choices=SINCE_LABELS, required=False, label="Opened or reopened")
    recovered = forms.ChoiceField(choices=RECOVERED_FILTERS, required=False, label="Recovered")


# -- queue rows ------------------------------------------------------------------------------


@dataclass(slots=True)
class EscalationRow:
    escalation: Escalation
    job_url: str
    step_url: str
    attempts: int | None
    age: str
    overdue: bool
    can_acknowledge: bool
    can_resolve: bool
    can_reopen: bool
    can_take: bool
    recovered: bool


def job_recovered():
    """True when the escalation's job recovered: replay wrote the "job recovered" audit entry
    (the job finished completed while the escalation was unresolved, docs/architecture.md
    "Escalations") and the job is still completed (a retry that failed it again takes the
    badge away). False, never NULL, for an escalation without a job."""
    recovered_entry = EscalationEntry.objects.filter(
        escalation=OuterRef("pk"), action="job recovered"
    )
    return Case(
        When(Q(Exists(recovered_entry), job__status=RunStatus.COMPLETED), then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )


def _latest_attempt():
    """The failing node's latest failed attempt number (else its latest), from its Step rows."""
    latest = Step.objects.filter(job=OuterRef("job"), node_id=OuterRef("node_id"))
    return Subquery(
        latest.failed_attempt_first().values("attempt")[:1], output_field=IntegerField()
    )


def _with_row_data(escalations_qs):
    return (
        escalations_qs.select_related("job", "assignee")
        .defer(*JOB_DEFERRED)
        .annotate(latest_attempt=_latest_attempt(), recovered=job_recovered())
    )


def job_links(job: Job | None, node_id: str, attempt: int | None) -> tuple[str, str]:
    """The job page URL and the deep link to the node's step panel ("" when there is none)."""
    if job is None:
        return "", ""
    job_url = reverse("jobs:job", args=[job.job_id])
    step_url = f"{job_url}?{step_query(node_id, attempt)}" if node_id and attempt else ""
    return job_url, step_url


def _row(escalation: Escalation, user, can_act: bool, now: datetime) -> EscalationRow:
    attempt = getattr(escalation, "latest_attempt", None)
    job_url, step_url = job_links(escalation.job, escalation.node_id, attempt)
    if not escalation.node_id and escalation.job is not None:
        attempt = escalation.job.max_attempt or None  # job-level: the job's most attempts
    may = permissions.allowed(escalation, user, can_act)
    waited = permissions.age(escalation, now)
    return EscalationRow(
        escalation=escalation,
        job_url=job_url,
        step_url=step_url,
        attempts=attempt,
        age=waited.label,
        overdue=waited.overdue,
        can_acknowledge=may.acknowledge,
        can_resolve=may.resolve,
        can_reopen=may.reopen,
        can_take=may.take,
        recovered=getattr(escalation, "recovered", False),
    )


def filter_escalations(filters: dict, user, now: datetime):
    """The queue's queryset for the parsed filters, without the kind filter (the counts per
    kind are taken over it), annotated ``recovered`` (``job_recovered``), ordered open first,
    then acknowledged, then resolved, and within each the most severe first, then the oldest
    trigger first (age counts from the event that triggered the escalation, not from when
    traceviz noticed it)."""
    escalations_qs = Escalation.objects.all()
    statuses = STATUS_FILTER_VALUES.get(filters.get("status") or "active")
    if statuses:
        escalations_qs = escalations_qs.filter(status__in=statuses)
    if filters.get("severity"):
        escalations_qs = escalations_qs.filter(severity=filters["severity"])
    assignee = (filters.get("assignee") or "").strip()
    if assignee == "mine":
        escalations_qs = escalations_qs.filter(assignee=user)
    elif assignee == "unassigned":
        escalations_qs = escalations_qs.filter(assignee__isnull=True)
    elif assignee:
        escalations_qs = escalations_qs.filter(assignee__username=assignee)
    if filters.get("job"):
        escalations_qs = escalations_qs.filter(job__job_id=filters["job"].strip())
    if filters.get("since") in SINCE_FILTERS:
        escalations_qs = escalations_qs.filter(opened_at__gte=now - SINCE_FILTERS[filters["since"]])
    escalations_qs = escalations_qs.annotate(recovered=job_recovered())
    if filters.get("recovered") in ("yes", "no"):
        escalations_qs = escalations_qs.filter(recovered=filters["recovered"] == "yes")
    status_rank = Case(
        When(status=Status.OPEN, then=Value(0)),
        When(status=Status.ACKNOWLEDGED, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    severity_rank = Case(
        *(
            When(severity=severity, then=Value(rank))
            for rank, severity in enumerate(SEVERITY_ORDER)
        ),
        default=Value(len(SEVERITY_ORDER)),
        output_field=IntegerField(),
    )
    return escalations_qs.annotate(status_rank=status_rank, severity_rank=severity_rank).order_by(
        "status_rank", "severity_rank", "triggered_at", "pk"
    )


@dataclass(slots=True)
class Queue:
    """The queue a query string asks for: its form, the escalations matching every filter
    (``matching``) and those matching all but the kind (the counts per kind)."""

    form: EscalationFilterForm
    kind: str
    without_kind: QuerySet[Escalation]
    matching: QuerySet[Escalation]


def queue_for(query: QueryDict, user, now: datetime) -> Queue:
    form = EscalationFilterForm(query)
    form.is_valid()  # an invalid field is shown with its error and left out of the filter
    filters = form.cleaned_data
    without_kind = filter_escalations(filters, user, now)
    kind = (filters.get("kind") or "").strip()
    matching = without_kind.filter(kind=kind) if kind else without_kind
    return Queue(form=form, kind=kind, without_kind=without_kind, matching=matching)


def _queue_context(request, query: QueryDict, now: datetime) -> dict:
    queue = queue_for(query, request.user, now)
    form, kind, without_kind, selected = queue.form, queue.kind, queue.without_kind, queue.matching
    filters = form.cleaned_data
    kind_counts = list(
        without_kind.order_by().values_list("kind").annotate(n=Count("pk")).order_by("kind")
    )
    paginator = Paginator(_with_row_data(selected), PAGE_SIZE)
    page = paginator.get_page(query.get("page"))
    can_act = access.can_act_on_escalations(request.user)
    rows = [_row(escalation, request.user, can_act, now) for escalation in page.object_list]
    support_users = list(permissions.support_users())
    base = query.copy()
    for name in ("page", "kind"):
        base.pop(name, None)
    page_query = query.copy()
    page_query.pop("page", None)
    return {
        "nav": "escalations",
        "form": form,
        "rows": rows,
        "page": page,
        "page_query": page_query.urlencode(),
        "kind": kind,
        "kind_counts": kind_counts,
        "kind_total": sum(n for _kind, n in kind_counts),
        "kind_missing": bool(kind) and kind not in dict(kind_counts),
        "kind_base_query": base.urlencode(),
        "query": query.urlencode(),
        "return_url": reverse("jobs:escalations") + ("?" + query.urlencode() if query else ""),
        "selected": {
            "status": filters.get("status") or "active",
            "kind": kind,
            "severity": filters.get("severity") or "",
            "assignee": (filters.get("assignee") or "").strip(),
            "job": (filters.get("job") or "").strip(),
            "since": filters.get("since") or "",
            "recovered": filters.get("recovered") or "",
        },
        "recovered_filters": RECOVERED_FILTERS,
        "status_filters": STATUS_FILTERS,
        "severities": Escalation.Severity.values,
        "since_filters": SINCE_LABELS,
        "assignee_names": [person.get_username() for person in support_users],
        "can_act": can_act,
        "bulk_actions": bulk.ACTIONS,
        "support_users": support_users if can_act else [],
        "bulk_max": BULK_MAX,
        "age_target": permissions.age_target(),
    }


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_list(request):
    """GET /escalations/: the queue, filtered by the URL; open first, most severe, oldest."""
    context = _queue_context(request, request.GET, timezone.now())
    template = "escalations/list.html"
    if wants_fragment(request):
        template += "#escalation-queue"
    return render(request, template, context)


# -- one escalation --------------------------------------------------------------------------


@dataclass(slots=True)
class AlertSubject:
    """What a firing alert rule's escalation is about: a provider/model or a failure code, and
    the jobs list filtered to the jobs of its latest episode's window."""

    label: str
    value: str
    jobs_url: str


def alert_subject(escalation: Escalation, now: datetime) -> AlertSubject | None:
    """The subject of an alert escalation (None for an escalation of a job)."""
    rule = escalation.alert_rule
    if rule is None:
        return None
    episode = (
        AlertEpisode.objects.filter(escalation=escalation).order_by("-firing_since", "-pk").first()
    )
    params: list[tuple[str, str]] = [("show", "all")]
    if rule.kind in failure_groups.GROUP_ALERT_KINDS:
        # The subject is a group's fingerprint: its jobs, whatever their start.
        subject = episode.subject if episode is not None else escalation.node_id
        params.append(("group", subject))
        return AlertSubject(label="Failure group", value=subject, jobs_url="/?" + urlencode(params))
    if rule.kind == AlertRule.Kind.FAILURE_CODE_RATE:
        label = "Failure code"
        params.append(("failure_code", rule.failure_code))
        provider, model = rule.provider, rule.model
    else:
        label = "Provider / model"
        provider = episode.provider if episode else rule.provider
        model = episode.model if episode else rule.model
    params.extend(
        (name, value) for name, value in (("provider", provider), ("model", model)) if value
    )
    if episode is not None:
        since = episode.firing_since - timedelta(minutes=rule.window_minutes)
        params.append(("since", iso(since)))
        params.append(("until", iso(episode.resolved_at or now)))
    # The episode names the whole subject; the escalation's node_id may be cut to its column.
    subject = episode.subject if episode is not None else escalation.node_id
    return AlertSubject(label=label, value=subject, jobs_url="/?" + urlencode(params))


def _detail_context(
    request, escalation: Escalation, *, error: str = "", note: str = "", comment: str = ""
) -> dict:
    job = escalation.job
    attempt = None
    if job is not None and escalation.node_id:
        attempt = (
            Step.objects.filter(job=job, node_id=escalation.node_id)
            .failed_attempt_first()
            .values_list("attempt", flat=True)
            .first()
        )
    job_url, step_url = job_links(job, escalation.node_id, attempt)
    retry_due = next_attempts([job]).get(job.pk) if job is not None else None
    can_act = access.can_act_on_escalations(request.user)
    now = timezone.now()
    may = permissions.allowed(escalation, request.user, can_act)
    waited = permissions.age(escalation, now)
    entries = list(escalation.entries.all())
    return {
        "nav": "escalations",
        "escalation": escalation,
        "job": job,
        "job_url": job_url,
        "step_url": step_url,
        "attempt": attempt,
        # Opened is when it was first opened; a reopening is shown beside it, never over it.
        "reopened": any(entry.action == "reopened" for entry in entries),
        "alert": alert_subject(escalation, now),
        "age": waited.label,
        "overdue": waited.overdue,
        "entries": entries,
        "failure_groups": failure_groups.groups_of_escalation(escalation),
        "recovered": job is not None
        and job.status == RunStatus.COMPLETED
        and any(entry.action == "job recovered" for entry in entries),
        "notifications": list(escalation.notifications.order_by("created_at", "pk")),
        "retry_due": retry_due,
        "can_act": can_act,
        "can_acknowledge": may.acknowledge,
        "can_resolve": may.resolve,
        "can_reopen": may.reopen,
        "support_users": list(permissions.support_users()) if can_act else [],
        "comment_chars": actions.COMMENT_CHARS,
        "error": error,
        "note": note,
        "comment": comment,
    }


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_detail(request, escalation_id: int):
    """GET /escalations/<id>/: the escalation, its audit trail and its notifications."""
    escalation = get_escalation_for_user(request, escalation_id)
    template = "escalations/detail.html"
    if wants_fragment(request):
        template += "#escalation-detail"
    return render(request, template, _detail_context(request, escalation))


# -- actions ---------------------------------------------------------------------------------


def _action_response(
    request, escalation: Escalation, *, error: str = "", note: str = "", comment: str = ""
):
    """What an action answers: the queue row when posted from the queue, the detail section
    when posted from the detail page, a redirect without HTMX.

    An HTMX error still answers 200 (htmx does not swap 4xx answers), with the error in the
    swapped fragment; without HTMX it is the whole page with a 400.
    """
    if request.htmx:
        if request.htmx.target == f"escalation-{escalation.pk}":
            escalation = _with_row_data(Escalation.objects.filter(pk=escalation.pk)).get()
            row = _row(escalation, request.user, True, timezone.now())
            context = {
                "row": row,
                "can_act": True,
                "row_error": error,
                "return_url": reverse("jobs:escalations"),
                "age_target": permissions.age_target(),
            }
            return render(request, "escalations/list.html#escalation-row", context)
        context = _detail_context(request, escalation, error=error, note=note, comment=comment)
        return render(request, "escalations/detail.html#escalation-detail", context)
    if error:
        context = _detail_context(request, escalation, error=error, note=note, comment=comment)
        return render(request, "escalations/detail.html", context, status=400)
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        next_url = reverse("jobs:escalation", args=[escalation.pk])
    return HttpResponseRedirect(next_url, status=303)


@require_POST
@access.role_required(access.can_act_on_escalations)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_transition(request, escalation_id: int, action: str):
    """POST /escalations/<id>/acknowledge|resolve|reopen/ (note: required to resolve)."""
    if action not in actions.ACTION_FROM:
        raise Http404("no such action")
    note = request.POST.get("note", "")
    with transaction.atomic():
        escalation = get_escalation_for_user(request, escalation_id, for_action=True)
        try:
            actions.apply_action(action, escalation, request.user, note)
        except actions.ActionError as error:
            return _action_response(request, escalation, error=str(error), note=note)
    return _action_response(request, escalation)


@require_POST
@access.role_required(access.can_act_on_escalations)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_comment(request, escalation_id: int):
    """POST /escalations/<id>/comment/ with ``comment``: an audit entry without a status
    change, notified like one (``actions.comment``)."""
    text = request.POST.get("comment", "")
    with transaction.atomic():
        escalation = get_escalation_for_user(request, escalation_id, for_action=True)
        try:
            actions.comment(escalation, request.user, text)
        except actions.ActionError as error:
            return _action_response(request, escalation, error=str(error), comment=text)
    return _action_response(request, escalation)


NOT_SUPPORT = "Assign to someone in the support group"


def _assignee(request, raw: str):
    """Who ``raw`` names: "me", a support user's id, or "" (nobody, None). Raises ActionError
    for anyone else."""
    raw = raw.strip()
    if raw == "me":
        return request.user
    if raw == "":
        return None
    assignee = permissions.support_users().filter(pk=bounded_int(raw, MAX_ROW_ID)).first()
    if assignee is None:
        raise actions.ActionError(NOT_SUPPORT)
    return assignee


@require_POST
@access.role_required(access.can_act_on_escalations)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_assign(request, escalation_id: int):
    """POST /escalations/<id>/assign/ with ``assignee``: "me", a user id, or "" to unassign."""
    with transaction.atomic():
        escalation = get_escalation_for_user(request, escalation_id, for_action=True)
        try:
            assignee = _assignee(request, request.POST.get("assignee", ""))
        except actions.ActionError as error:
            return _action_response(request, escalation, error=str(error))
        try:
            actions.assign(escalation, request.user, assignee)
        except actions.ActionError as error:
            return _action_response(request, escalation, error=str(error))
    return _action_response(request, escalation)


# -- bulk ------------------------------------------------------------------------------------


class BulkRequestError(ValueError):
    """A bulk request whose selection cannot be read: the message says why."""


def _selected_ids(request, now: datetime) -> list[int]:
    """The escalation ids a bulk request names: with ``select_all``, every escalation of the
    queue its ``return_query`` filters (all pages, not only the one shown); else its ``ids``.
    BulkRequestError for an id that is not one (ASCII digits of a 64-bit row id: ``int`` also
    reads '²' or '١٢') and for more than ``BULK_MAX``. ``ids`` may repeat, and each may hold
    several ids separated by commas."""
    if request.POST.get("select_all"):
        query = QueryDict(request.POST.get("return_query", ""))
        matching = queue_for(query, request.user, now).matching
        ids = list(matching.values_list("pk", flat=True)[: BULK_MAX + 1])
    else:
        # Repeated (the ticked rows) or comma-separated in one field (a preview's confirm form:
        # a thousand fields would pass Django's DATA_UPLOAD_MAX_NUMBER_FIELDS).
        raw_ids = [
            bounded_int(raw.strip(), MAX_ROW_ID)
            for field in request.POST.getlist("ids")
            for raw in field.split(",")
        ]
        if None in raw_ids:
            raise BulkRequestError("ids must be escalation numbers (ASCII digits)")
        ids = [i for i in raw_ids if i is not None]
    ids = sorted(set(ids))
    if len(ids) > BULK_MAX:
        raise BulkRequestError(
            f"A bulk action changes at most {BULK_MAX} escalations at once; "
            f"{'these filters match' if request.POST.get('select_all') else 'you selected'} "
            "more: narrow the filters"
        )
    return ids


def _bulk_assignee(request, action: str):
    """Whom a bulk "assign" assigns to (None: nobody, and for other actions)."""
    if action != "assign":
        return None
    return _assignee(request, request.POST.get("assignee", ""))


def _bulk_preview_response(request, preview: dict, return_query: QueryDict):
    if wants_fragment(request):
        return render(request, "escalations/list.html#bulk-preview", {"preview": preview})
    context = _queue_context(request, return_query, timezone.now())
    context["preview"] = preview
    status = 400 if preview["error"] else 200
    return render(request, "escalations/list.html", context, status=status)


@require_POST
@access.role_required(access.can_act_on_escalations)
@vary_on_headers("HX-Request")
@in_display_time_zone
def escalation_bulk(request):
    """POST /escalations/bulk/: ``ids`` (or ``select_all`` with the queue's ``return_query``),
    ``action`` (acknowledge, resolve, assign), ``note``, ``assignee`` (assign: "me", a support
    user's id, "" for nobody). Without ``confirm`` it previews what would change; with
    ``confirm`` it applies the action to those it still applies to, each through its action
    function, in one transaction."""
    action = request.POST.get("action", "")
    note = request.POST.get("note", "").strip()
    return_query = QueryDict(request.POST.get("return_query", ""))
    now = timezone.now()
    try:
        ids = _selected_ids(request, now)
    except BulkRequestError as unreadable:
        return HttpResponseBadRequest(str(unreadable))
    preview = {
        "action": action,
        "action_label": bulk.ACTIONS.get(action, ""),
        "to_status": actions.ACTION_TO.get(action, ""),
        "note": note,
        "assignee_value": request.POST.get("assignee", "").strip(),
        "assignee_name": "",
        "changes": [],
        "listed": [],
        "unlisted": 0,
        "unchanged": [],
        "error": "",
        "query": return_query.urlencode(),
    }
    try:
        assignee = _bulk_assignee(request, action)
    except actions.ActionError as refused:
        preview["error"] = str(refused)
        return _bulk_preview_response(request, preview, return_query)
    preview["assignee_name"] = bulk.who(assignee)
    if not request.POST.get("confirm"):
        selected = list(
            Escalation.objects.filter(pk__in=ids).select_related("job", "assignee").order_by("pk")
        )
        items, error = bulk.plan(action, selected, note, assignee)
        changes = [item for item in items if item.applies]
        preview.update(
            changes=changes,
            id_list=",".join(str(item.escalation.pk) for item in changes),
            listed=changes[:PREVIEW_LISTED],
            unlisted=max(len(changes) - PREVIEW_LISTED, 0),
            unchanged=[item for item in items if not item.applies],
            error=error,
        )
        return _bulk_preview_response(request, preview, return_query)
    with transaction.atomic():
        selected = list(Escalation.objects.filter(pk__in=ids).select_for_update().order_by("pk"))
        items, error = bulk.plan(action, selected, note, assignee)
        changed = [item.escalation for item in items if item.applies] if not error else []
        for escalation in changed:
            bulk.apply(action, escalation, request.user, note, assignee)
    verb = bulk.DONE.get(action, "Changed")
    message = error or f"{verb} {len(changed)} escalation{'s' if len(changed) != 1 else ''}"
    if action == "assign" and changed:
        message += f" to {bulk.who(assignee)}"
    if len(items) > len(changed) and not error:
        message += f"; {len(items) - len(changed)} left unchanged"
    if not request.htmx:
        return HttpResponseRedirect(
            reverse("jobs:escalations") + ("?" + return_query.urlencode() if return_query else ""),
            status=303,
        )
    context = _queue_context(request, return_query, timezone.now())
    context["bulk_message"] = message
    return render(request, "escalations/list.html#escalation-queue", context)
