"""Prometheus metrics kept in the database (DESIGN.md section 6, source 001 metrics).

Counters are rows of ``Counter`` incremented with ``INSERT ... ON CONFLICT DO UPDATE`` (one
statement per batch), inside the ingest transaction, so every web process adds to the same number,
a rolled-back batch counts nothing and restarts lose nothing. A scrape builds a fresh
``CollectorRegistry`` from those rows and a few small aggregates (open escalations, contract
findings, firing alerts); it never reads the event table.
"""

import json
import logging
import re
import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import wraps

from django.db import DatabaseError, connection
from django.db.models import Count
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from jobs.contract import events
from jobs.models import AlertEpisode, Counter, Escalation, Job
from jobs.replay.failures import ResultType

logger = logging.getLogger(__name__)

PARSE_INVALID = "pdca_next_step_parse_invalid_total"
DEGRADED = "pdca_next_step_degraded_total"
EVENTS_INGESTED = "traceviz_events_ingested_total"
STEPS = "traceviz_steps_finished_total"
REJECTIONS = "traceviz_ingest_rejections_total"
INGEST_LATENCY = "traceviz_ingest_request_duration_seconds"

PLANNER_COUNTERS = {
    "graph.next_step.parse_invalid": PARSE_INVALID,
    "graph.next_step.degraded": DEGRADED,
}


@dataclass(frozen=True, slots=True)
class CounterSpec:
    documentation: str
    label_names: tuple[str, ...]


COUNTERS: dict[str, CounterSpec] = {
    PARSE_INVALID: CounterSpec(
        "Planner outputs that failed to parse (source 001).", ("provider", "model")
    ),
    DEGRADED: CounterSpec(
        "Planner runs that ended degraded after bounded retries (source 001).",
        ("provider", "model"),
    ),
    EVENTS_INGESTED: CounterSpec("Events stored (duplicates not counted), by type.", ("type",)),
    STEPS: CounterSpec("node_finished events stored, by result_type.", ("result_type",)),
    REJECTIONS: CounterSpec(
        "Ingest items or requests refused, by field and message class.", ("field", "reason")
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

    Runs in the caller's transaction: inside ``store_batch`` the counts commit with the events.
    """
    rows = [(name, labels, value) for (name, labels), value in sorted(deltas.items()) if value]
    if not rows:
        return
    table = connection.ops.quote_name(Counter._meta.db_table)
    sql = (
        f"INSERT INTO {table} (name, labels, value) VALUES "
        + ", ".join(["(%s, %s, %s)"] * len(rows))
        + f" ON CONFLICT (name, labels) DO UPDATE SET value = {table}.value + excluded.value"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


def _label_value(value) -> str:
    return value[:LABEL_VALUE_CHARS] if isinstance(value, str) and value else "unknown"


def record_batch(new_events: Iterable[events.Event]) -> None:
    """Count a batch's newly stored events (resends are not new, so they count once)."""
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
    increment(deltas)


# --- ingest requests: rejections and latency -------------------------------------------------


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


def rejection_deltas(status: int, body: dict) -> Tally:
    """Counter deltas for one ingest response: each item error, or the request's own error."""
    deltas: Tally[tuple[str, str]] = Tally()
    item_errors = body.get("errors") if isinstance(body.get("errors"), list) else []
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
    deltas[INGEST_LATENCY + "_sum", labels_key()] += seconds
    return deltas


def measure_ingest(view):
    """Ingest view decorator: observes request latency and counts refused items and requests
    (after the view's own transaction, in one upsert)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        started = time.perf_counter()
        response = view(request, *args, **kwargs)
        deltas = latency_deltas(time.perf_counter() - started)
        if response.status_code in (207,) or response.status_code >= 400:
            try:
                body = json.loads(response.content)
            except ValueError:
                body = {}
            deltas.update(
                rejection_deltas(response.status_code, body if isinstance(body, dict) else {})
            )
        try:
            increment(deltas)
        except DatabaseError:
            # Metrics must never turn an ingest answer (already decided) into a 500.
            logger.warning("ingest metrics not recorded", exc_info=True)
        return response

    return wrapper


# --- scrape ----------------------------------------------------------------------------------


class DatabaseCollector:
    """Reads counter rows and current gauges; one instance per scrape."""

    def collect(self):
        rows = Counter.objects.values_list("name", "labels", "value").order_by("name", "labels")
        by_name: dict[str, list[tuple[dict, float]]] = {}
        for name, labels, value in rows:
            by_name.setdefault(name, []).append((json.loads(labels or "{}"), value))
        for name, spec in COUNTERS.items():
            family = CounterMetricFamily(name, spec.documentation, labels=spec.label_names)
            for labels, value in by_name.get(name, []):
                family.add_metric([labels.get(label, "") for label in spec.label_names], value)
            yield family
        yield self._latency(by_name)
        yield self._gauge(
            "traceviz_escalations_open",
            "Escalations not resolved, by kind.",
            "kind",
            Escalation.objects.exclude(status=Escalation.Status.RESOLVED)
            .values_list("kind")
            .annotate(n=Count("id"))
            .order_by("kind"),
        )
        yield self._gauge(
            "traceviz_contract_findings",
            "Contract findings on stored jobs, by kind.",
            "kind",
            contract_findings_by_kind(),
        )
        yield self._gauge(
            "traceviz_alerts_firing",
            "Alert episodes firing, by rule.",
            "rule",
            AlertEpisode.objects.filter(resolved_at__isnull=True)
            .values_list("rule__name")
            .annotate(n=Count("id"))
            .order_by("rule__name"),
        )

    @staticmethod
    def _gauge(name, documentation, label, rows):
        family = GaugeMetricFamily(name, documentation, labels=[label])
        for value, count in rows:
            family.add_metric([value], count)
        return family

    @staticmethod
    def _latency(by_name):
        buckets = {
            labels.get("le"): value for labels, value in by_name.get(INGEST_LATENCY + "_bucket", [])
        }
        total = sum(value for _labels, value in by_name.get(INGEST_LATENCY + "_sum", []))
        return HistogramMetricFamily(
            INGEST_LATENCY,
            "Ingest request latency (POST /api/v1/events), seconds.",
            buckets=[(repr(b), buckets.get(repr(b), 0)) for b in LATENCY_BUCKETS]
            + [(INF, buckets.get(INF, 0))],
            sum_value=total,
        )


def contract_findings_by_kind() -> list[tuple[str, int]]:
    """(kind, count) over every stored job's findings: one aggregate over the jobs table."""
    table = connection.ops.quote_name(Job._meta.db_table)
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT f->>'kind', count(*) FROM {table}, jsonb_array_elements({table}.findings) f "
            f"WHERE {table}.findings <> '[]'::jsonb GROUP BY 1 ORDER BY 1"
        )
    else:
        sql = (
            f"SELECT json_extract(f.value, '$.kind'), count(*) FROM {table}, "
            f"json_each({table}.findings) f WHERE {table}.findings <> '[]' GROUP BY 1 ORDER BY 1"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [(kind or "unknown", count) for kind, count in cursor.fetchall()]


def exposition() -> bytes:
    """The Prometheus text exposition of every metric, built from database rows."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return generate_latest(registry)
