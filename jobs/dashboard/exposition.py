"""The Prometheus scrape (GET /metrics): counter rows and a few current gauges as text.

A scrape builds a fresh ``CollectorRegistry`` from the ``Counter`` rows ingest keeps
(``ingest.counters``) and a few small aggregates (open escalations, contract findings, failure
records that ended their job, firing alerts, the projection's dirty marks); it never reads the
event table.
"""

import json

from django.conf import settings
from django.db.models import Case, Count, F, Q, When
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from jobs.ingest import database, projector
from jobs.ingest.counters import COUNTERS, INF, INGEST_LATENCY, LATENCY_BUCKETS
from jobs.models import AlertEpisode, Counter, Escalation, Failure

FAILURES = "traceviz_failures"


class DatabaseCollector:
    """Reads counter rows and current gauges; one instance per scrape."""

    def collect(self):
        rows = Counter.objects.values_list("name", "labels", "value").order_by("name", "labels")
        by_name: dict[str, list[tuple[dict, float]]] = {}
        for name, labels, value in rows:
            by_name.setdefault(name, []).append((json.loads(labels or "{}"), value))
        for name, spec in COUNTERS.items():
            family = CounterMetricFamily(name, spec.documentation, labels=spec.label_names)
            series = [
                ([labels.get(label, "") for label in spec.label_names], value)
                for labels, value in by_name.get(name, [])
            ]
            if spec.producer_labels:
                series = capped(series, settings.TRACEVIZ_METRICS_MAX_SERIES)
            for label_values, value in series:
                family.add_metric(label_values, value)
            yield family
        yield self._latency(by_name)
        dirty_jobs, lag = projector.dirty_summary(timezone.now())
        yield GaugeMetricFamily(
            "traceviz_projection_dirty_jobs",
            "Jobs with events stored but not yet folded into their rows.",
            value=dirty_jobs,
        )
        yield GaugeMetricFamily(
            "traceviz_projection_lag_seconds",
            "How long the longest-dirty job has waited for its events to be projected "
            "(0 when none waits).",
            value=lag,
        )
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
            database.findings_by_kind(),
        )
        yield self._failures()
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
    def _failures():
        """Failure records of stored jobs that ended their job (``ended_their_job``: not
        recovered by a later attempt nor handled, in a failed-family job), by kind and the
        provider/model that failed: the record's, else (a step failure no failed call names
        one for) its job's. Provider and model are producer text: the busiest series only."""
        named = Q(provider__gt="") | Q(model__gt="")
        rows = (
            Failure.objects.ended_their_job()
            .annotate(
                failed_provider=Case(When(named, then=F("provider")), default=F("job__provider")),
                failed_model=Case(When(named, then=F("model")), default=F("job__model")),
            )
            .values_list("kind", "failed_provider", "failed_model")
            .annotate(n=Count("id"))
            .order_by("kind", "failed_provider", "failed_model")
        )
        family = GaugeMetricFamily(
            FAILURES,
            "Failure records of stored jobs that ended their job, by kind (step, job, planner) "
            "and the provider/model that failed.",
            labels=["kind", "provider", "model"],
        )
        series = [([kind, provider, model], float(n)) for kind, provider, model, n in rows]
        for label_values, value in capped(series, settings.TRACEVIZ_METRICS_MAX_SERIES):
            family.add_metric(label_values, value)
        return family

    @staticmethod
    def _latency(by_name):
        buckets = {
            labels.get("le"): value for labels, value in by_name.get(INGEST_LATENCY + "_bucket", [])
        }
        total = sum(value for _labels, value in by_name.get(INGEST_LATENCY + "_sum", []))
        return HistogramMetricFamily(
            INGEST_LATENCY,
            "Ingest request latency (POST /api/v1/events, /v1/traces and /v1/logs), seconds.",
            buckets=[(repr(b), buckets.get(repr(b), 0)) for b in LATENCY_BUCKETS]
            + [(INF, buckets.get(INF, 0))],
            sum_value=total,
        )


def capped(series: list[tuple[list[str], float]], limit: int) -> list[tuple[list[str], float]]:
    """The ``limit`` largest series as they are, the rest summed into one series whose every
    label is "other" (none when nothing is left over). Ties keep label order, so a scrape is
    deterministic. A pair that climbs into the top moves its count out of "other", which
    Prometheus reads as a counter reset of "other": rate() copes, and the number of series a
    producer can create stays bounded."""
    if len(series) <= limit:
        return series
    ranked = sorted(series, key=lambda item: (-item[1], item[0]))
    kept, rest = ranked[:limit], ranked[limit:]
    other = ["other"] * len(rest[0][0])
    total = sum(value for _labels, value in rest)
    # A producer's own "other" among the kept series takes the rest, so no series repeats.
    merged = [(labels, value + total if labels == other else value) for labels, value in kept]
    if other not in [labels for labels, _value in kept]:
        merged.append((other, total))
    return merged


def exposition() -> bytes:
    """The Prometheus text exposition of every metric, built from database rows."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return generate_latest(registry)
