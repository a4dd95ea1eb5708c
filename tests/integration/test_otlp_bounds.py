"""Every value of a span is bounded where it is read (issue 34): an integer past the contract's
bounds refuses its span with the reason in the OTLP partial-success (the other spans are
stored), a long string is cut with a marker that counts in its length, and numbers that feed
sums are bounded so no sum overflows. Run on SQLite and PostgreSQL: PostgreSQL refuses what does
not fit a column, where SQLite would store it."""

import json

import pytest

from jobs.contract import events
from jobs.models import Call, Event, Job, Step

pytestmark = pytest.mark.django_db

TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_ID = "eee19b7ec3c1b174"
CHILD_ID = "eee19b7ec3c1b173"
OTHER_ID = "eee19b7ec3c1b172"
START = 1_772_442_000_000_000_000


def _value(value) -> dict:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def json_span(name: str, span_id: str, parent: str = "", kind: int = 1, **attributes) -> dict:
    return {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(START),
        "endTimeUnixNano": str(START + 250_000_000),
        "attributes": [
            {"key": key.replace("__", "."), "value": _value(value)}
            for key, value in attributes.items()
        ],
    }


def otlp_json(*spans: dict) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()


@pytest.fixture
def post_traces(client, ingest_token):
    def post(*spans: dict):
        return client.post(
            "/v1/traces",
            otlp_json(*spans),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
        )

    return post


CELERY_RUN = {"celery__task_name": "tasks.fetch", "celery__state": "SUCCESS"}


@pytest.mark.parametrize(
    ("key", "sent", "extra"),
    [
        ("traceviz.attempt", 2**31, {}),
        ("traceviz.attempt", 2**63 - 1, {}),
        ("traceviz.attempt", "99999999999", {}),
        ("traceviz.step_index", 2**31, {}),
        ("traceviz.step_index", "99999999999", {}),
        ("traceviz.epoch", "9" * 31, {}),
        ("traceviz.step_epoch", "9" * 31, {}),
        ("celery.retries", 2**31, CELERY_RUN),
        ("celery.retries", "99999999999", CELERY_RUN),
        ("gen_ai.usage.input_tokens", 2**63 - 1, {"gen_ai__operation__name": "chat"}),
        ("llm.token_count.completion", "9" * 40, {"openinference__span__kind": "LLM"}),
    ],
)
def test_an_integer_past_its_bound_refuses_its_span_and_says_why(post_traces, key, sent, extra):
    attributes = {key.replace(".", "__"): sent, **extra}
    kind = 5 if extra is CELERY_RUN else 1
    response = post_traces(
        json_span("run", ROOT_ID),
        json_span("fetch", CHILD_ID, ROOT_ID, kind=kind, **attributes),
        json_span("store", OTHER_ID, ROOT_ID),
    )
    assert response.status_code == 200, response.content
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    assert partial["errorMessage"].startswith(f"span {CHILD_ID} 'fetch': payload.attributes.{key}")
    assert "must be an integer from" in partial["errorMessage"]
    assert sorted(Step.objects.values_list("node_id", flat=True)) == ["store"]
    assert Job.objects.get(job_id=TRACE_ID).name == "run"


@pytest.mark.parametrize("key", ["traceviz.attempt", "traceviz.step_index", "celery.retries"])
def test_an_integer_at_its_bound_is_stored(post_traces, key):
    bound = {"traceviz.attempt": 1_000_000, "traceviz.step_index": 10_000_000}.get(key, 999_999)
    attributes = {key.replace(".", "__"): bound, **CELERY_RUN}
    response = post_traces(
        json_span("run", ROOT_ID), json_span("fetch", CHILD_ID, ROOT_ID, kind=5, **attributes)
    )
    assert response.json() == {}
    step = Step.objects.get()
    if key == "traceviz.step_index":
        assert step.step_index == bound
    else:
        assert step.attempt == (bound if key == "traceviz.attempt" else bound + 1)


def test_a_span_event_from_the_event_api_is_bounded_as_a_span_from_otlp(send):
    span = {
        "type": "span",
        "job_id": "j1",
        "ts": "2026-03-02T09:00:00Z",
        "payload": {
            "trace_id": TRACE_ID,
            "span_id": CHILD_ID,
            "end": "2026-03-02T09:00:01Z",
            "attributes": {"traceviz.attempt": 2**40},
        },
    }
    ok = {**span, "payload": {**span["payload"], "span_id": OTHER_ID, "attributes": {}}}
    response = send([span, ok])
    assert response.status_code == 207, response.content
    (rejected,) = response.json()["errors"]
    assert rejected["errors"] == [
        {
            "field": "payload.attributes.traceviz.attempt",
            "message": "must be an integer from 1 to 1000000",
        }
    ]
    assert Event.objects.filter(type="span").count() == 1


def test_token_counts_at_their_bound_sum_within_the_columns(post_traces):
    usage = {
        "openinference__span__kind": "LLM",
        "llm__provider": "openai",
        "llm__model_name": "o1-pro",
        "llm__token_count__prompt": events.MAX_TOKENS,
        "llm__token_count__completion": events.MAX_TOKENS,
    }
    spans = [json_span("run", ROOT_ID)] + [
        json_span(f"call {n}", f"{n + 1:016x}", ROOT_ID, **usage) for n in range(12)
    ]
    response = post_traces(*spans)
    assert response.json() == {}
    job = Job.objects.get()
    assert job.input_tokens == 12 * events.MAX_TOKENS
    assert Call.objects.count() == 12
    assert all(call.cost is not None for call in Call.objects.all())
    assert job.cost is not None


def test_a_provider_and_model_over_200_characters_are_cut(post_traces):
    response = post_traces(
        json_span("run", ROOT_ID),
        json_span(
            "chat",
            CHILD_ID,
            ROOT_ID,
            gen_ai__operation__name="chat",
            gen_ai__provider__name="p" * 250,
            gen_ai__request__model="m" * 250,
            gen_ai__usage__input_tokens=10,
        ),
    )
    assert response.json() == {}
    call = Call.objects.get()
    assert len(call.provider) <= 200 and call.provider.startswith("p" * 100)
    assert len(call.model) <= 200 and call.model.endswith("chars]")


def test_two_sibling_spans_with_the_same_200_character_name_are_two_steps(post_traces):
    name = "n" * 200
    response = post_traces(
        json_span("run", ROOT_ID),
        json_span(name, CHILD_ID, ROOT_ID),
        json_span(name, OTHER_ID, ROOT_ID),
    )
    assert response.json() == {}
    node_ids = sorted(Step.objects.values_list("node_id", flat=True))
    assert len(node_ids) == 2 and len(set(node_ids)) == 2
    assert all(len(node_id) <= 200 for node_id in node_ids)
    assert node_ids[0] == name or node_ids[1] == name


@pytest.mark.parametrize("length", range(201, 210))
def test_traceviz_strings_and_span_names_just_past_200_characters_are_cut(post_traces, length):
    long = "x" * (length - 1) + "é"
    response = post_traces(
        json_span(
            long,
            ROOT_ID,
            traceviz__job_id="j" * length,
            traceviz__workflow=long,
            traceviz__provider=long,
        ),
        json_span(
            long,
            CHILD_ID,
            ROOT_ID,
            traceviz__node_id=long,
            traceviz__failure_code=long,
            traceviz__error_type=long,
            traceviz__tool=long,
            traceviz__source=long,
            traceviz__plan_hash=long,
            traceviz__state=long,
        ),
    )
    assert response.json() == {}
    job = Job.objects.get()
    assert len(job.job_id) == 200 and job.job_id.endswith("chars]")
    assert len(job.name) <= 200 and len(job.workflow) <= 200 and len(job.provider) <= 200
    step = Step.objects.get()
    for value in (step.node_id, step.failure_code, step.error_type, step.tool, step.state):
        assert len(value) <= 200 and value.endswith("chars]"), value


@pytest.mark.parametrize("length", [*range(195, 215), 1000])
def test_the_cut_marker_counts_in_the_length(length):
    value = "a" * length
    cut = events.cut(value, 200)
    assert len(cut) == min(length, 200) or (length > 200 and len(cut) >= 190)
    assert len(cut) <= 200
    assert (cut == value) == (length <= 200)
    if length > 200:
        kept = cut.split("…")[0]
        assert cut.endswith(f"… [+{length - len(kept)} chars]")


def test_a_message_index_of_5000_digits_in_a_span_from_the_event_api_is_an_attribute(send, client):
    key = "llm.input_messages." + "9" * 5000 + ".message.role"
    span = {
        "type": "span",
        "job_id": "j1",
        "ts": "2026-03-02T09:00:00Z",
        "payload": {
            "trace_id": TRACE_ID,
            "span_id": CHILD_ID,
            "end": "2026-03-02T09:00:01Z",
            "attributes": {"openinference.span.kind": "LLM", key: "user"},
        },
    }
    response = send([span])
    assert response.status_code == 200, response.content
    assert Job.objects.filter(job_id="j1").exists()
    assert Call.objects.get().kind == "llm"
