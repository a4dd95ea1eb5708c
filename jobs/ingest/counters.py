"""Counters on the write path (docs/architecture.md; the planner contract's metrics): what ingest
adds to the Prometheus counters kept in the database.

Counters are rows of ``Counter`` incremented with ``INSERT ... ON CONFLICT DO UPDATE`` (one
statement per fold), so every process adds to the same number, a rolled-back fold counts nothing
and restarts lose nothing. The event counts come out of the projection step (``projector``), not
the append: the hot counter rows stay out of the append's transaction, each event is counted
once, when it is folded, and the counts lag with the rows they describe.
``dashboard.exposition`` reads them for a scrape.
"""

import json
import re
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs.contract import events
from jobs.ingest import database
from jobs.models import Counter
from jobs.replay.failures import ResultType

PARSE_INVALID = "pdca_next_step_parse_invalid_total"
DEGRADED = "pdca_next_step_degraded_total"
EVENTS_INGESTED = "traceviz_events_ingested_total"
STEPS = "traceviz_steps_finished_total"
REJECTIONS = "traceviz_ingest_rejections_total"
INGEST_LATENCY = "traceviz_ingest_request_duration_seconds"
PROJECTIONS = "traceviz_projections_total"
REQUESTS = "traceviz_ingest_requests_total"
SPANS = "traceviz_otlp_spans_total"
LOG_RECORDS = "traceviz_otlp_log_records_total"

PLANNER_COUNTERS = {
    "graph.next_step.parse_invalid": PARSE_INVALID,
    "graph.next_step.degraded": DEGRADED,
}


@dataclass(frozen=True, slots=True)
class CounterSpec:
    documentation: str
    label_names: tuple[str, ...]
    # Label values a producer chooses freely (provider, model): /metrics shows only the
    # busiest series and adds the rest up under "other" (TRACEVIZ_METRICS_MAX_SERIES).
    producer_labels: bool = False


COUNTERS: dict[str, CounterSpec] = {
    PARSE_INVALID: CounterSpec(
        "Planner outputs that failed to parse (the planner contract).",
        ("provider", "model"),
        producer_labels=True,
    ),
    DEGRADED: CounterSpec(
        "Planner runs that ended degraded after bounded retries (the planner contract).",
        ("provider", "model"),
        producer_labels=True,
    ),
    EVENTS_INGESTED: CounterSpec("Events stored (duplicates not counted), by type.", ("type",)),
    STEPS: CounterSpec(
        "Steps finished, by result_type: node_finished events stored, and the steps "
        "OpenTelemetry spans are (each once, when replay first makes it a step).",
        ("result_type",),
    ),
    REJECTIONS: CounterSpec(
        "Ingest items or requests refused, by field and message class.", ("field", "reason")
    ),
    REQUESTS: CounterSpec(
        "Ingest requests answered, by endpoint (events: /api/v1/events, traces: /v1/traces, "
        "logs: /v1/logs) and HTTP status.",
        ("endpoint", "status"),
    ),
    SPANS: CounterSpec(
        "OpenTelemetry spans received on /v1/traces, by outcome (accepted, rejected).",
        ("outcome",),
    ),
    LOG_RECORDS: CounterSpec(
        "OpenTelemetry log records received on /v1/logs, by outcome (accepted, rejected).",
        ("outcome",),
    ),
    PROJECTIONS: CounterSpec(
        "Jobs projected, by path: incremental (new events folded onto the job's snapshot) or "
        "full (replayed from all its events: out-of-order events, rebuilds).",
        ("path",),
    ),
}
# Upper bounds (seconds) of the ingest latency histogram's buckets.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
INF = "+Inf"
LABEL_VALUE_CHARS = 100

# Event types and field names are free text from producers; only known ones become label
# values, so a hostile producer cannot grow the number of series.
KNOWN_EVENT_TYPES = frozenset(events.PAYLOAD_FIELDS)
KNOWN_PAYLOAD_FIELDS = frozenset(
    name for fields in events.PAYLOAD_FIELDS.values() for name in fields
)
KNOWN_CONTEXT_FIELDS = frozenset(events.CONTEXT_FIELDS)


def labels_key(**labels: str) -> str:
    """The canonical text key of a label set: sorted JSON, so one series has one row."""
    return json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def increment(deltas: Mapping[tuple[str, str], float]) -> None:
    """Add each delta to its (name, labels key) counter row in one upsert statement.

    Runs in the caller's transaction: inside a fold the counts commit with its rows.
    """
    database.add_to_counters(Counter, deltas)


def _label_value(value) -> str:
    return value[:LABEL_VALUE_CHARS] if isinstance(value, str) and value else "unknown"


def record_batch(
    new_events: Iterable[events.Event],
    projections: Mapping[str, int] | None = None,
    span_steps: Mapping[str, int] | None = None,
) -> None:
    """Count a fold's newly folded events (each is folded once, so resends count once), the
    jobs it projected by path and the steps spans became (by result type), in one statement:
    the fold's only write of the shared counter rows (``projection.Counted``)."""
    # Tally plain label values first; each series' key is built once per batch, not per event.
    by_type: Tally[str] = Tally()
    by_result: Tally[str] = Tally()
    by_planner: Tally[tuple[str, str, str]] = Tally()
    for event in new_events:
        by_type[event.type if event.type in KNOWN_EVENT_TYPES else "other"] += 1
        if event.type == "node_finished":
            by_result[str(event.payload.get("result_type") or ResultType.SUCCESS.value)] += 1
        elif counter := PLANNER_COUNTERS.get(event.type):
            provider = _label_value(event.payload.get("provider"))
            by_planner[counter, provider, _label_value(event.payload.get("model"))] += 1
    deltas: dict[tuple[str, str], int] = {}
    for event_type, count in by_type.items():
        deltas[EVENTS_INGESTED, labels_key(type=event_type)] = count
    for result_type, count in by_result.items():
        deltas[STEPS, labels_key(result_type=result_type)] = count
    for (counter, provider, model), count in by_planner.items():
        deltas[counter, labels_key(provider=provider, model=model)] = count
    increment(_and_projection(deltas, projections, span_steps))


def record_projections(by_path: Mapping[str, int], span_steps: Mapping[str, int]) -> None:
    """Count the jobs a projection run replayed, by path (rebuilds and purges), and the steps
    spans became, in one statement."""
    increment(_and_projection({}, by_path, span_steps))


def _and_projection(
    deltas: dict[tuple[str, str], int],
    by_path: Mapping[str, int] | None,
    span_steps: Mapping[str, int] | None,
) -> dict[tuple[str, str], int]:
    """``deltas`` plus the projections by path and the steps that spans became (``projection``:
    each once, when its Step row is first written), by result type."""
    for path, count in (by_path or {}).items():
        deltas[PROJECTIONS, labels_key(path=path)] = count
    for result_type, count in (span_steps or {}).items():
        key = (STEPS, labels_key(result_type=result_type))
        deltas[key] = deltas.get(key, 0) + count
    return deltas


def projections_by_path() -> dict[str, int]:
    """The jobs projected so far by path ("full": replayed whole, "incremental": folded onto
    their snapshot), as ``traceviz_projections_total`` counts them."""
    return {
        path: int(value)
        for path in ("full", "incremental")
        for value in Counter.objects.filter(
            name=PROJECTIONS, labels=labels_key(path=path)
        ).values_list("value", flat=True)
    }


# --- ingest requests: rejections and latency -----------------------------------------------


def rejection_field(path: str) -> str:
    """A field path as a bounded label: known envelope and payload fields, else a class."""
    if path.startswith("("):
        return path if path in ("(line)", "(item)") else "(request)"
    parts = [re.sub(r"\[\d+\]", "", part) for part in path.split(".")]
    if parts[0] != "payload":
        return parts[0] if parts[0] in events.ENVELOPE_FIELDS else "(unknown field)"
    if len(parts) == 1:
        return "payload"
    if parts[1] not in KNOWN_PAYLOAD_FIELDS:
        return "payload.(other)"
    if parts[1] == "context" and len(parts) > 2:
        return f"payload.context.{parts[2] if parts[2] in KNOWN_CONTEXT_FIELDS else '(other)'}"
    return f"payload.{parts[1]}"


def rejection_reason(message: str) -> str:
    """A message's class: the text before any detail (':'), numbers as N. Messages come from a
    fixed set in ``events``; only details after a colon (JSON parser text) vary."""
    head = message.split(":", 1)[0].strip()
    return re.sub(r"\d+", "N", head)[:80] or "other"


def span_deltas(accepted: int, rejections: list[str]) -> Tally:
    """Counter deltas for the spans of one /v1/traces request and each rejected span's reason
    (field "(span)")."""
    return _otlp_deltas(SPANS, "(span)", accepted, rejections)


def log_record_deltas(accepted: int, rejections: list[str]) -> Tally:
    """Counter deltas for the records of one /v1/logs request and each rejected record's reason
    (field "(log record)")."""
    return _otlp_deltas(LOG_RECORDS, "(log record)", accepted, rejections)


def _otlp_deltas(counter: str, field: str, accepted: int, rejections: list[str]) -> Tally:
    deltas: Tally[tuple[str, str]] = Tally()
    if accepted:
        deltas[counter, labels_key(outcome="accepted")] += accepted
    if rejections:
        deltas[counter, labels_key(outcome="rejected")] += len(rejections)
    for message in rejections:
        # "<what> 'name': why": the class of why.
        why = message.split(": ", 1)[-1]
        deltas[REJECTIONS, labels_key(field=field, reason=rejection_reason(why))] += 1
    return deltas


def request_deltas(endpoint: str, status: int) -> Tally:
    return Tally({(REQUESTS, labels_key(endpoint=endpoint, status=str(status))): 1})


def rejection_deltas(status: int, body: dict) -> Tally:
    """Counter deltas for one ingest response: each item error, or the request's own error."""
    deltas: Tally[tuple[str, str]] = Tally()
    item_errors = body.get("errors")
    if not isinstance(item_errors, list):
        item_errors = []
    for item in item_errors:
        for error in item.get("errors", []):
            labels = labels_key(
                field=rejection_field(str(error.get("field", ""))),
                reason=rejection_reason(str(error.get("message", ""))),
            )
            deltas[REJECTIONS, labels] += 1
    if status >= 400 and not item_errors:
        reason = f"{status} {rejection_reason(str(body.get('error', '')))}".strip()
        deltas[REJECTIONS, labels_key(field="(request)", reason=reason)] += 1
    return deltas


def latency_deltas(seconds: float) -> Tally:
    """Cumulative histogram bucket increments for one observation, plus its sum and count."""
    deltas: Tally[tuple[str, str]] = Tally()
    for bound in LATENCY_BUCKETS:
        if seconds <= bound:
            deltas[INGEST_LATENCY + "_bucket", labels_key(le=repr(bound))] += 1
    deltas[INGEST_LATENCY + "_bucket", labels_key(le=INF)] += 1
    # typeshed types a Counter's counts as int; it adds floats as well.
    deltas[INGEST_LATENCY + "_sum", labels_key()] += seconds  # type: ignore[assignment]
    return deltas
