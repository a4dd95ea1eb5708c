"""Narrative lines of OpenTelemetry span events: the step each span became, the job's root, and
on error the same one-line reason the step panel shows."""

from jobs.contract import otlp
from jobs.web import narrative
from tests.otlp_spans import ERROR, exception_event, request, root, sid, span


def lines(*spans, span_steps=None):
    traces = otlp.to_batch(request(*spans), max_events=100)
    events = [event for _, event in traces.batch.events]
    return [line.text for line in narrative.lines_for(events, span_steps=span_steps or {})]


def test_span_lines_name_their_step_and_the_jobs_root():
    assert lines(
        root(end_ms=2000),
        span(name="fetch", span_id=sid(1), start_ms=10, end_ms=260),
        span_steps={sid(1).hex(): ("fetch", 1)},
    ) == [
        "Span run · the job's root · done in 2.0 s",
        "Span fetch · step fetch attempt 1 · done in 250 ms",
    ]


def test_failed_span_line_has_the_one_line_reason_not_the_traceback():
    failing = span(
        status=ERROR,
        span_events=[exception_event("ConnectionError", "gateway timeout\nmore", "Traceback")],
    )
    assert lines(failing) == ["Span fetch · error in 1.5 s: ConnectionError: gateway timeout"]
