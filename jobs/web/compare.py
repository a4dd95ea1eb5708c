"""Compare two runs: the page (GET /compare/?a=<job>[&b=<job>]) and its JSON twin
(GET /api/v1/compare), docs/compare.md.

Job ids may hold slashes, so both travel in the query string. Without ``b`` the run set
against ``a`` is picked here (``pick_baseline``). The comparison itself is
``jobs.replay.compare.compare``; this module reads the two runs' rows for it (``load_run``) and
renders what it returns.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

import orjson
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from jobs.models import Call, Job, JobAlias
from jobs.replay import compare
from jobs.replay.failures import RunStatus
from jobs.web import compare_schemas, span_panel
from jobs.web.access import can_view
from jobs.web.decorators import database_unavailable_is_503, json_error, token_or_login_required
from jobs.web.narrative import format_duration_ms
from jobs.web.rendering import in_display_time_zone, step_query

STEP_COLUMNS = (
    "node_id",
    "attempt",
    "position",
    "result_type",
    "reason",
    "failure_code",
    "error_type",
    "exception_type",
    "ignored_stale",
    "started_at",
    "finished_at",
    "duration_ms",
    "payload_results",
    "context",
)
CALL_COLUMNS = (
    "node_id",
    "attempt",
    "position",
    "kind",
    "name",
    "status",
    "provider",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
)
# The columns of the Job rows the comparison shows (not the fold snapshot nor the strip).
JOB_COLUMNS = ("job_id", "status", "workflow", "name", "started_at", "finished_at", "partition_day")


# Read as text: the JSON columns are parsed only where the two runs' texts differ
# (``compare.RunStep``), the timestamps by ``fromisoformat`` (a tenth of the driver's loader).
TEXT_COLUMNS = ("started_at", "finished_at", "payload_results", "context")


def _moment(text: str | None) -> datetime | None:
    """A timestamp read as text: ISO 8601, with an offset on PostgreSQL and in UTC without one
    on SQLite."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def load_run(job: Job) -> compare.Run:
    """The run's steps and calls as the comparison reads them: two queries, plain rows (no
    model instances), the calls without their transcripts (``transcripts`` reads those for
    the nodes a page shows)."""
    columns = [f"{name}_text" if name in TEXT_COLUMNS else name for name in STEP_COLUMNS]
    rows = (
        job.own_steps()
        .annotate(**{f"{name}_text": Cast(name, TextField()) for name in TEXT_COLUMNS})
        .values_list(*columns)
    )
    steps = [
        compare.RunStep(
            node_id=node_id,
            attempt=attempt,
            position=position,
            result_type=result_type,
            reason=reason,
            failure_code=failure_code,
            error_type=error_type or exception_type,
            ignored_stale=stale,
            started_at=_moment(started_at),
            finished_at=_moment(finished_at),
            duration_ms=duration_ms,
            payload_results=payload_results,
            context=context,
        )
        for (
            node_id,
            attempt,
            position,
            result_type,
            reason,
            failure_code,
            error_type,
            exception_type,
            stale,
            started_at,
            finished_at,
            duration_ms,
            payload_results,
            context,
        ) in rows
    ]
    calls = [
        compare.RunCall(*row) for row in Call.objects.filter(job=job).values_list(*CALL_COLUMNS)
    ]
    return compare.Run(job.job_id, job.status, steps, calls)


def transcripts(job: Job, node_ids: list[str]) -> dict[tuple[str, int], list]:
    """The messages of the calls of ``node_ids``, by (node, call position)."""
    rows = Call.objects.filter(job=job, node_id__in=node_ids).values_list(
        "node_id", "position", "messages"
    )
    return {(node_id, position): messages for node_id, position, messages in rows}


def find_job(job_id: str) -> Job | None:
    """The job ``job_id`` names, or the job an alias of it (a trace id) names; None."""
    jobs = Job.objects.only(*JOB_COLUMNS)
    job = jobs.filter(job_id=job_id).first()
    if job is None and (named := JobAlias.objects.job_of(job_id)) is not None:
        job = jobs.filter(job_id=named).first()
    return job


def pick_baseline(job: Job) -> tuple[Job | None, str]:
    """The run to set ``job`` against when none was named, and how it was picked (or why none
    was): the latest earlier run of the same workflow that completed, else the latest earlier
    run of it. Earlier is by start time (the job id breaks a tie)."""
    if not job.workflow:
        return None, "this job names no workflow, so there is no earlier run of it to pick"
    if job.started_at is None:
        return None, "this job has no start time, so no run of its workflow is earlier"
    earlier = (
        Job.objects.only(*JOB_COLUMNS)
        .filter(workflow=job.workflow)
        .filter(Q(started_at__lt=job.started_at) | Q(started_at=job.started_at, pk__lt=job.pk))
        .order_by("-started_at", "-pk")
    )
    completed = earlier.filter(status=RunStatus.COMPLETED).first()
    if completed is not None:
        return completed, f"the latest earlier run of {job.workflow} that completed"
    latest = earlier.first()
    if latest is not None:
        return latest, f"the latest earlier run of {job.workflow}: no earlier run of it completed"
    return None, f"no run of {job.workflow} started before this one"


@dataclass(frozen=True)
class Pair:
    """The two runs a request asks for, or why it cannot be answered."""

    a: Job | None = None
    b: Job | None = None
    b_picked: str | None = None
    status: int = 200
    error: str = ""


def resolve_pair(a_id: str, b_id: str) -> Pair:
    """The jobs ``a`` and ``b`` name (``b`` picked when empty): 400 without ``a``, 404 for a
    job that is not here or a workflow with no earlier run."""
    if not a_id:
        return Pair(status=400, error="a is required: the id of the job to compare")
    a = find_job(a_id)
    if a is None:
        return Pair(status=404, error=f"no job {a_id!r}")
    if not b_id:
        b, why = pick_baseline(a)
        if b is None:
            return Pair(a=a, status=404, error=f"nothing to compare {a.job_id!r} with: {why}")
        return Pair(a=a, b=b, b_picked=why)
    b = find_job(b_id)
    if b is None:
        return Pair(a=a, status=404, error=f"no job {b_id!r}")
    return Pair(a=a, b=b)


@csrf_exempt  # bearer-token API: GET only; other methods get 405, not a CSRF 403
@require_GET
@database_unavailable_is_503
@token_or_login_required
def compare_api(request):
    """GET /api/v1/compare?a=<job>[&b=<job>]: the comparison as JSON."""
    pair = resolve_pair(request.GET.get("a", ""), request.GET.get("b", ""))
    if pair.error:
        return json_error(pair.status, pair.error)
    assert pair.a is not None and pair.b is not None  # resolve_pair: both, or an error
    comparison = compare.compare(load_run(pair.a), load_run(pair.b))
    body = compare_schemas.comparison_body(comparison, pair.a, pair.b, pair.b_picked)
    return HttpResponse(orjson.dumps(body), content_type="application/json")


# Cards the page shows whole by default (the differing nodes, in the aligned order); the rest
# are a link away (``shown``), and every one of them is in the JSON.
CARDS_SHOWN = 200
MAX_CARDS_SHOWN = 20_000
# Node ids a run of alike nodes names (the rest are counted).
GAP_NAMES = 300
CHANGE_WORDS = {
    compare.Change.SAME: "same",
    compare.Change.CHANGED: "changed",
    compare.Change.NEW_FAILURE: "new failure",
    compare.Change.FIXED: "fixed",
    compare.Change.ONLY_IN_A: "only in a",
    compare.Change.ONLY_IN_B: "only in b",
}
KIND_WORDS = {
    "result": "its result differs",
    "arguments": "its arguments differ",
    "payload_results": "its payload results differ",
    "model": "its model differs",
    "definition": "its step definition differs",
    "only_in_a": "only a ran it",
    "only_in_b": "only b ran it",
}


@require_GET
@login_required
@in_display_time_zone
def compare_page(request):
    """GET /compare/?a=<job>[&b=<job>][&shown=N]: the first divergence and every difference of
    two runs, node by node. Without ``b`` the run is set against ``pick_baseline``'s (the page
    says which). A job asked for by an alias (a trace id) redirects to its job's id; a missing
    ``a`` is a 400 and an unknown job a 404, each with a form to try again."""
    if not can_view(request.user):
        raise PermissionDenied
    a_id, b_id = request.GET.get("a", ""), request.GET.get("b", "")
    pair = resolve_pair(a_id, b_id)
    context = {"nav": "jobs", "a_id": a_id, "b_id": b_id, "pair": pair}
    if pair.error:
        return render(request, "compare/page.html", context, status=pair.status)
    assert pair.a is not None and pair.b is not None  # resolve_pair: both, or an error
    if pair.a.job_id != a_id or (b_id and pair.b.job_id != b_id):
        query = {"a": pair.a.job_id} | ({"b": pair.b.job_id} if b_id else {})
        return redirect(f"{request.path}?{urlencode(query)}")
    comparison = compare.compare(load_run(pair.a), load_run(pair.b))
    shown = _shown(request.GET.get("shown"))
    context.update(_page_context(request, comparison, pair, shown))
    return render(request, "compare/page.html", context)


def _shown(raw: str | None) -> int:
    if raw and raw.isascii() and raw.isdecimal() and len(raw) <= 6:
        return min(max(int(raw), CARDS_SHOWN), MAX_CARDS_SHOWN)
    return CARDS_SHOWN


def _has_card(node: compare.NodeComparison) -> bool:
    return node.diverges or node.slower or node.token_or_cost_changed


def _page_context(request, comparison: compare.Comparison, pair: Pair, shown: int) -> dict:
    a, b = pair.a, pair.b
    assert a is not None and b is not None  # resolve_pair answered 400 or 404 otherwise
    first = comparison.first_divergence
    anchors: dict[str, str] = {}
    cards: list[tuple[int, compare.NodeComparison]] = []
    for index, node in enumerate(comparison.nodes):
        if _has_card(node):
            anchors[node.node_id] = f"node-{index}"
            cards.append((index, node))
    card_ids = [node.node_id for _index, node in cards[:shown]]
    first_index = next(
        (i for i, node in enumerate(comparison.nodes) if first and node.node_id == first.node_id),
        None,
    )
    if first is not None and first.node_id not in card_ids:
        card_ids.append(first.node_id)
    messages_a = transcripts(a, card_ids)
    messages_b = transcripts(b, card_ids)
    shown_ids = {node.node_id for _index, node in cards[:shown]}
    base_query = {"a": a.job_id, "b": b.job_id}

    def href(node_id: str) -> str:
        """Where a difference's link goes: the node's card, on this page or on a page that
        shows enough cards."""
        anchor = anchors[node_id]
        if node_id in shown_ids:
            return f"#{anchor}"
        rank = next(i for i, (_, node) in enumerate(cards) if node.node_id == node_id)
        return "?" + urlencode(base_query | {"shown": rank + CARDS_SHOWN}) + f"#{anchor}"

    items: list[dict] = []
    gap: list[str] = []
    for index, node in enumerate(comparison.nodes):
        if node.node_id in shown_ids:
            if gap:
                items.append(_gap(gap))
                gap = []
            items.append(_card(node, index, a, b, first, messages_a, messages_b))
        elif not _has_card(node):
            gap.append(node.node_id)
    if gap:
        items.append(_gap(gap))
    return {
        "a": a,
        "b": b,
        "b_picked": pair.b_picked,
        "a_href": _job_href(a),
        "b_href": _job_href(b),
        "swap_href": "?" + urlencode({"a": b.job_id, "b": a.job_id}),
        "first": first,
        "first_words": KIND_WORDS.get(first.kind, "") if first else "",
        "first_href": href(first.node_id) if first else "",
        "first_card": _card(
            comparison.nodes[first_index], first_index, a, b, first, messages_a, messages_b
        )
        if first_index is not None
        else None,
        "node_count": len(comparison.nodes),
        "alike_count": sum(1 for node in comparison.nodes if not node.diverges),
        "differences": _differences(comparison, href),
        "totals": {
            "a_tokens": (comparison.a_totals.input_tokens, comparison.a_totals.output_tokens),
            "b_tokens": (comparison.b_totals.input_tokens, comparison.b_totals.output_tokens),
            "a_cost": span_panel.format_cost(comparison.a_totals.cost),
            "b_cost": span_panel.format_cost(comparison.b_totals.cost),
            "input_delta": _signed(comparison.input_tokens_delta),
            "output_delta": _signed(comparison.output_tokens_delta),
            "cost_delta": _signed_cost(comparison.cost_delta),
            "any": any(
                (
                    comparison.a_totals.input_tokens,
                    comparison.a_totals.output_tokens,
                    comparison.b_totals.input_tokens,
                    comparison.b_totals.output_tokens,
                    comparison.a_totals.cost is not None,
                    comparison.b_totals.cost is not None,
                )
            ),
        },
        "items": items,
        "cards_hidden": max(len(cards) - shown, 0),
        "more_href": "?" + urlencode(base_query | {"shown": min(shown * 5, MAX_CARDS_SHOWN)})
        if len(cards) > shown
        else "",
        "api_href": "/api/v1/compare?" + urlencode(base_query),
    }


def _job_href(job: Job) -> str:
    return reverse("jobs:job", args=[job.job_id])


def _gap(node_ids: list[str]) -> dict:
    return {
        "gap": True,
        "count": len(node_ids),
        "names": node_ids[:GAP_NAMES],
        "more": max(len(node_ids) - GAP_NAMES, 0),
    }


def _signed(number: int) -> str:
    return f"{number:+,}" if number else "0"


def _signed_cost(amount) -> str:
    if amount is None:
        return ""
    if not amount:
        return "$0"
    sign = "+" if amount > 0 else "-"
    return sign + span_panel.format_cost(abs(amount))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _key_summary(rows: list[compare.KeyChange]) -> str:
    """``rows: 118500 → 120000; mode removed``: the changed keys of an object in one line."""
    parts = []
    for row in rows[:4]:
        if row.status is compare.KeyStatus.CHANGED and row.text_diff:
            parts.append(f"{row.key}: {_first_change(row.text_diff)}")
        elif row.status is compare.KeyStatus.CHANGED:
            parts.append(f"{row.key}: {_short(row.b, 30)} → {_short(row.a, 30)}")
        else:
            parts.append(f"{row.key} {row.status.value}")
    if len(rows) > 4:
        parts.append(f"{len(rows) - 4} more")
    return "; ".join(parts)


def _first_change(diff: tuple[str, ...]) -> str:
    """The first line a text diff removes and the first it adds: ``day = :day → day >= :day``."""
    body = diff[2:]  # after the "--- b" / "+++ a" header
    removed = next((line[1:].strip() for line in body if line.startswith("-")), "")
    added = next((line[1:].strip() for line in body if line.startswith("+")), "")
    return f"{_short(removed, 40) or '(nothing)'} → {_short(added, 40) or '(nothing)'}"


def _differences(comparison: compare.Comparison, href) -> list[dict]:
    """The page's list of differences, a section per kind, each item linking its node."""
    Change, Facet = compare.Change, compare.Facet

    def item(node: compare.NodeComparison, text: str) -> dict:
        return {"node_id": node.node_id, "href": href(node.node_id), "text": text}

    def reason(side: compare.NodeSide | None) -> str:
        if side is None:
            return ""
        return _short(f"{side.result_type}: {side.reason}" if side.reason else side.result_type)

    results = [
        node
        for node in comparison.nodes
        if node.change is Change.CHANGED
        and (Facet.RESULT in node.differences or Facet.PAYLOAD_RESULTS in node.differences)
    ]
    sections = [
        (
            "new-failures",
            "New failures",
            "fail in a, not in b",
            [item(n, reason(n.a)) for n in comparison.having(Change.NEW_FAILURE)],
        ),
        (
            "fixed",
            "Fixed failures",
            "fail in b, not in a",
            [item(n, reason(n.b)) for n in comparison.having(Change.FIXED)],
        ),
        (
            "only-in-a",
            "Nodes added",
            "only a ran them",
            [item(n, reason(n.a)) for n in comparison.having(Change.ONLY_IN_A)],
        ),
        (
            "only-in-b",
            "Nodes removed",
            "only b ran them",
            [item(n, reason(n.b)) for n in comparison.having(Change.ONLY_IN_B)],
        ),
        (
            "arguments",
            "Changed arguments",
            "b → a",
            [
                item(n, _key_summary(n.arguments() + n.expected_arguments()))
                for n in comparison.differing_in(Facet.ARGUMENTS)
            ],
        ),
        (
            "results",
            "Changed results",
            "b → a",
            [
                item(
                    n,
                    "; ".join(
                        part
                        for part in (
                            f"{reason(n.b)} → {reason(n.a)}"
                            if Facet.RESULT in n.differences
                            else "",
                            _key_summary(n.payload_results()),
                        )
                        if part
                    ),
                )
                for n in results
            ],
        ),
        (
            "definitions",
            "Changed step definitions",
            "b → a",
            [
                item(n, _key_summary(n.definition()))
                for n in comparison.differing_in(Facet.DEFINITION)
            ],
        ),
        (
            "models",
            "Model changes",
            "b → a",
            [item(n, _model_change(n)) for n in comparison.differing_in(Facet.MODEL)],
        ),
        (
            "slower",
            "Slower steps",
            "over twice as long and over a second more",
            [item(n, _slower_words(n)) for n in comparison.slower],
        ),
        (
            "tokens",
            "Token and cost changes",
            "a minus b",
            [
                item(
                    n,
                    f"{_signed(n.input_tokens_delta)} in, {_signed(n.output_tokens_delta)} out"
                    + (f", {_signed_cost(n.cost_delta)}" if n.cost_delta else ""),
                )
                for n in comparison.token_or_cost_changes
            ],
        ),
    ]
    return [
        {"id": key, "title": title, "hint": hint, "items": items}
        for key, title, hint, items in sections
    ]


def _card(
    node: compare.NodeComparison,
    index: int,
    a: Job,
    b: Job,
    first: compare.Divergence | None,
    messages_a: dict,
    messages_b: dict,
) -> dict:
    """A node's card: both sides' result, arguments, payload results, duration, calls with
    their transcripts, and step definition."""
    return {
        "gap": False,
        "anchor": f"node-{index}",
        "node_id": node.node_id,
        "change": node.change.value,
        "change_word": CHANGE_WORDS[node.change],
        "first": first is not None and first.node_id == node.node_id,
        "differences": [facet.value for facet in node.differences],
        "a": _side(node.a, a),
        "b": _side(node.b, b),
        "slower": node.slower,
        "duration_delta": _duration_delta(node.duration_delta_ms),
        "tokens_delta": f"{_signed(node.input_tokens_delta)} in, "
        f"{_signed(node.output_tokens_delta)} out"
        if node.input_tokens_delta or node.output_tokens_delta
        else "",
        "cost_delta": _signed_cost(node.cost_delta) if node.cost_delta else "",
        "objects": [
            ("Arguments (actual)", _rows(node.arguments(include_same=True))),
            ("Arguments (expected)", _rows(node.expected_arguments(include_same=True))),
            ("Payload results", _rows(node.payload_results(include_same=True))),
            ("Step definition", _rows(node.definition(include_same=True))),
        ],
        "calls": _call_pairs(node, messages_a, messages_b),
    }


def _duration_delta(delta_ms: float | None) -> str:
    if delta_ms is None or abs(delta_ms) < 1:
        return ""
    sign = "+" if delta_ms > 0 else "-"
    return sign + format_duration_ms(abs(delta_ms))


def _side(side: compare.NodeSide | None, job: Job) -> dict | None:
    if side is None:
        return None
    return {
        "result": side.result_type,
        "segment": side.segment.value,
        "attempts": side.attempts,
        "reason": side.reason,
        "code": " · ".join(part for part in (side.failure_code, side.error_type) if part),
        "duration": format_duration_ms(side.duration_ms) or "—",
        "models": ", ".join(side.models),
        "tokens": f"{side.input_tokens:,} in, {side.output_tokens:,} out"
        if side.input_tokens or side.output_tokens
        else "",
        "cost": span_panel.format_cost(side.cost),
        "href": _job_href(job) + "?" + step_query(side.node_id, side.final_attempt),
    }


def _messages(stored) -> list[dict]:
    if not isinstance(stored, list):
        return []
    return [
        {
            "direction": m.get("direction", ""),
            "role": m.get("role") or ("input" if m.get("direction") == "in" else "output"),
            "content": str(m.get("content", "")),
        }
        for m in stored
        if isinstance(m, dict)
    ]


def _call_pairs(node: compare.NodeComparison, messages_a: dict, messages_b: dict) -> list:
    """The node's calls, a's n-th beside b's n-th, each with its transcript: [(side, call)]."""
    a_calls = list(node.a.calls) if node.a else []
    b_calls = list(node.b.calls) if node.b else []
    return [
        [
            ("a", _call(a_calls[i], messages_a) if i < len(a_calls) else None),
            ("b", _call(b_calls[i], messages_b) if i < len(b_calls) else None),
        ]
        for i in range(max(len(a_calls), len(b_calls)))
    ]


def _call(call: compare.RunCall, messages: dict) -> dict:
    return {
        "messages": _messages(messages.get((call.node_id, call.position))),
        "position": call.position,
        "kind": call.kind,
        "name": call.name,
        "model": call.model_name,
        "tokens": f"{call.input_tokens or 0:,} in, {call.output_tokens or 0:,} out"
        if call.input_tokens is not None or call.output_tokens is not None
        else "",
        "cost": span_panel.format_cost(call.cost),
        "failed": call.status == "error",
    }


def _shown_value(text: str) -> str:
    """A value as the page shows it: JSON, but a string of several lines as its lines."""
    if text.startswith('"') and "\\n" in text:
        return json.loads(text)
    return text


def _rows(changes: list[compare.KeyChange]) -> list[dict]:
    return [
        {
            "key": row.key,
            "status": row.status.value,
            "a": _shown_value(row.a),
            "b": _shown_value(row.b),
            "diff": [
                {"text": line, "css": _diff_css(line)}
                for line in row.text_diff[2:]  # the "--- b" / "+++ a" header says nothing
            ],
        }
        for row in changes
    ]


def _diff_css(line: str) -> str:
    if line.startswith("@@"):
        return "diff-hunk"
    if line.startswith("+"):
        return "diff-add"
    if line.startswith("-"):
        return "diff-del"
    return ""


def _sides(node: compare.NodeComparison) -> tuple[compare.NodeSide, compare.NodeSide]:
    """Both runs' sides of a node that both ran (a changed model, a slower step)."""
    assert node.a is not None and node.b is not None
    return node.a, node.b


def _model_change(node: compare.NodeComparison) -> str:
    a, b = _sides(node)
    return f"{', '.join(b.models) or 'none'} → {', '.join(a.models) or 'none'}"


def _slower_words(node: compare.NodeComparison) -> str:
    a, b = _sides(node)
    if not b.duration_ms or a.duration_ms is None:
        return f"→ {format_duration_ms(a.duration_ms)}"
    return (
        f"{format_duration_ms(b.duration_ms)} → {format_duration_ms(a.duration_ms)}"
        f" ({a.duration_ms / b.duration_ms:.1f}x)"
    )
