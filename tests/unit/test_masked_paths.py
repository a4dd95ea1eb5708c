"""What redaction masked, said by path (docs/contract.md, "Redaction"; docs/otlp.md): the OTLP
mapping redacts every text of a span before it bounds it and records the paths it masked, and
replay gives a step the masked paths of its events. Pure, no database."""

from dataclasses import replace

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from jobs.contract import otlp
from jobs.contract.redaction import MASK
from jobs.replay import walk
from tests.factories import finished, parsed, started
from tests.otlp_spans import ROOT_ID, START, attrs, request, root, sid, span

GITHUB_TOKEN = "ghp_" + "CorpusGithub0123456789abcdefABCDEF12"


def stored_spans(*spans: Span, resource=None) -> list:
    """The events of these spans as /v1/traces validates them, in order."""
    traces = otlp.to_batch(request(*spans, resource=resource), max_events=10_000)
    assert traces.rejections == []
    return [event for _index, event in traces.batch.events]


def test_span_records_every_path_it_masked_and_never_the_value():
    [event] = stored_spans(
        span(
            name=f"push {GITHUB_TOKEN}",
            status=Status(code=Status.StatusCode.STATUS_CODE_ERROR, message="password=hunter2pw"),
            attributes=attrs(
                http__request__header__authorization="Bearer abcDEF0123456789",
                http__method="GET",
                llm__token_count__prompt=1843,
            ),
            span_events=[
                Span.Event(
                    name="exception",
                    time_unix_nano=START,
                    attributes=attrs(exception__message=f"denied {GITHUB_TOKEN}"),
                )
            ],
            links=[
                Span.Link(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, attributes=attrs(pwd="x"))
            ],
        ),
        resource=attrs(db__connection_string="postgres://app:hunter2pw@db:5432/app"),
    )
    assert event.masked == (
        "attributes.http.request.header.authorization",
        "name",
        "status.message",
        "events[0].attributes.exception.message",
        "links[0].attributes.pwd",
        "resource.db.connection_string",
    )
    assert event.payload["attributes"]["http.method"] == "GET"
    assert event.payload["attributes"]["llm.token_count.prompt"] == 1843
    assert "hunter2pw" not in repr(event) and "CorpusGithub" not in repr(event)


def test_secret_straddling_a_span_bound_is_masked_whole():
    near_the_cut = "x" * (otlp.MAX_VALUE_BYTES - 60)
    straddling = f"{near_the_cut} {GITHUB_TOKEN} " + "y" * 1000
    over_the_budget = "n" * (otlp.MAX_ATTRIBUTES_BYTES - 250)
    [event] = stored_spans(
        span(
            status=Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=straddling),
            attributes=attrs(
                input__value=straddling,
                notes=f"{over_the_budget} {GITHUB_TOKEN} " + "z" * 1000,
                small="kept",
            ),
        )
    )
    payload = event.payload
    for text in (payload["status"]["message"], payload["attributes"]["input.value"]):
        assert text.startswith(f"{near_the_cut} {MASK}")
        assert "ghp_" not in text and "[truncated" in text
    assert payload["attributes"]["notes"].startswith(f"{over_the_budget} {MASK}")
    assert "ghp_" not in payload["attributes"]["notes"]
    assert set(event.masked) == {"status.message", "attributes.input.value", "attributes.notes"}


def test_attribute_key_that_is_a_secret_is_masked():
    [event] = stored_spans(span(attributes=attrs(tokens={GITHUB_TOKEN: "repo", "main": "x"})))
    assert event.payload["attributes"]["tokens"] == {MASK: "repo", "main": "x"}
    assert event.masked == (f"attributes.tokens.{MASK}",)


def test_planner_event_of_a_span_event_records_its_own_masked_fields():
    planner = Span.Event(
        name="graph.next_step.degraded",
        time_unix_nano=START,
        attributes=attrs(provider="openai", model="m", reason=f"key {GITHUB_TOKEN} refused"),
    )
    span_event, planner_event = stored_spans(span(span_events=[planner]))
    assert span_event.masked == ("events[0].attributes.reason",)
    assert planner_event.type == "graph.next_step.degraded"
    assert planner_event.payload["reason"] == f"key {MASK} refused"
    assert planner_event.masked == ("reason",)


def test_trace_step_shows_the_paths_masked_in_its_span():
    job = attrs(traceviz__job_id="masked-run")
    events = stored_spans(
        root(attributes=job),
        span(span_id=sid(2), attributes=attrs(http__request__header__cookie="sid=1")),
    )
    state = walk.build(events)
    [step] = state.steps
    assert step.masked == ["attributes.http.request.header.cookie"]


def test_step_gathers_the_masked_paths_of_its_events_once_each():
    started_event, finished_event, again = parsed(
        [
            started("n1", "j1", 0),
            finished("n1", "retryable_failure", "j1", 1),
            finished("n1", "permanent_failure", "j1", 2),
        ]
    )
    events = [
        replace(started_event, masked=("context",)),
        replace(finished_event, masked=("payload_results.password", "reason")),
        replace(again, masked=("reason",)),
        *parsed([started("n2", "j1", 3)]),
    ]
    state = walk.build(events)
    assert [step.masked for step in state.steps] == [
        ["context", "payload_results.password", "reason"],
        [],
    ]


def test_paths_masked_in_the_root_span_are_not_a_steps():
    events = stored_spans(
        root(name=f"run {GITHUB_TOKEN}", attributes=attrs(traceviz__job_id="r")),
        span(parent=ROOT_ID),
    )
    assert events[0].masked == ("name",)
    assert [step.masked for step in walk.build(events).steps] == [[]]
