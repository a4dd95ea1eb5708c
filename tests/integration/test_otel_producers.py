"""Real producers, as users instrument them, exporting to a live traceviz over OTLP/HTTP
(docs/otlp.md): a LangGraph graph through OpenInference's LangChainInstrumentor with
langchain-core's fake chat models, a Celery task through opentelemetry-instrumentation-celery
on a real worker (Redis when there is one; eager otherwise), and plain OpenTelemetry SDK traces
(the OpenAI client's: test_otel_openai.py). No network, no real LLM. Each test asserts what a user
sees: status, attempts, reasons, provider/model, tokens and cost, the transcript, and no false
escalation."""

import operator
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from celery import Celery
from django.contrib.auth.models import User
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy
from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
from opentelemetry.context import Context
from opentelemetry.instrumentation.celery import CeleryInstrumentor

from jobs.ingest import counters, parity
from jobs.models import Call, Counter, Job, Step
from tests.conftest import REDIS_URL

pytestmark = pytest.mark.django_db(transaction=True)


def steps_of(job: Job) -> list[tuple]:
    return list(job.steps.order_by("position").values_list("node_id", "attempt", "result_type"))


def escalation_kinds(job: Job) -> list[str]:
    return sorted(job.escalations.values_list("kind", flat=True))


def taking_turns(turns: int) -> list[str]:
    """The steps of an agent and its tools taking ``turns`` turns: agent, tools, agent #2..."""
    return [
        f"{node} #{turn}" if turn > 1 else node
        for turn in range(1, turns + 1)
        for node in ("agent", "tools")
    ]


# --- LangGraph through OpenInference ---------------------------------------------------------


class FakeOpenAI(FakeMessagesListChatModel):
    """langchain-core's fake chat model, reporting itself as OpenAI's gpt-4o-mini."""

    model_name: str = "gpt-4o-mini"

    @property
    def _llm_type(self) -> str:
        return "openai"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _get_ls_params(self, stop=None, **kwargs):
        params = super()._get_ls_params(stop=stop, **kwargs)
        return {**params, "ls_provider": "openai", "ls_model_name": self.model_name}


class Plan(TypedDict):
    question: str
    answer: str
    tries: int


def agent_graph(model: FakeOpenAI, flaky_failures: int):
    """plan (an LLM call, then planner events about its output), flaky (a RetryPolicy node that
    fails ``flaky_failures`` times), use_tool (a tool that raises, caught by the node)."""
    tries = {"flaky": 0}

    @tool
    def lookup(query: str) -> str:
        """Look a customer up."""
        raise ValueError("lookup service down: 503")

    def plan(state: Plan):
        reply = model.invoke([HumanMessage(content=state["question"])])
        # The planner's output did not parse the first time (the planner contract's events).
        get_current_span().add_event(
            "graph.next_step.parse_invalid",
            {"provider": "openai", "model": "gpt-4o-mini", "attempt": 1, "reason": "not json"},
        )
        return {"answer": reply.content}

    def flaky(state: Plan):
        tries["flaky"] += 1
        if tries["flaky"] <= flaky_failures:
            raise ConnectionError(f"timeout talking to crm (try {tries['flaky']})")
        return {"tries": tries["flaky"]}

    def use_tool(state: Plan):
        try:
            lookup.invoke({"query": state["question"]})
        except ValueError:
            return {"answer": "answered without the lookup"}
        return {}

    graph = StateGraph(Plan)
    graph.add_node("plan", plan)
    graph.add_node(
        "flaky",
        flaky,
        retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionError),
    )
    graph.add_node("use_tool", use_tool)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "flaky")
    graph.add_edge("flaky", "use_tool")
    graph.add_edge("use_tool", END)
    return graph.compile()


@pytest.fixture
def langchain_traced(exporting):
    provider = exporting("support-agent")
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider
    instrumentor.uninstrument()


def fake_model() -> FakeOpenAI:
    usage = {"input_tokens": 1200, "output_tokens": 30, "total_tokens": 1230}
    return FakeOpenAI(responses=[AIMessage(content="Refund the order", usage_metadata=usage)] * 2)


def test_langgraph_run_with_retries_and_a_handled_tool_error_is_told_truthfully(
    langchain_traced,
):
    result = agent_graph(fake_model(), flaky_failures=2).invoke(
        {"question": "Why was I charged twice?", "answer": "", "tries": 0}
    )
    assert result["tries"] == 3
    # Each span came in a request of its own, as it ended. Folded onto the job: flaky's three
    # attempts (each retry turns the stored failure before it retryable) and the tool's step.
    # Replayed whole: the LLM call and plan (nothing was folded yet), use_tool (the parent the
    # tool's step waited for) and the root.
    assert counters.projections_by_path() == {"full": 4, "incremental": 4}

    job = Job.objects.get()
    assert (job.status, job.name, job.workflow) == ("completed", "LangGraph", "support-agent")
    assert steps_of(job) == [
        ("plan", 1, "success"),
        ("flaky", 1, "retryable_failure"),
        ("flaky", 2, "retryable_failure"),
        ("flaky", 3, "success"),
        ("use_tool", 1, "success"),
        ("lookup", 1, "permanent_failure"),
    ]
    flaky = Step.objects.get(job=job, node_id="flaky", attempt=1)
    assert flaky.reason == "ConnectionError: timeout talking to crm (try 1)"
    assert (flaky.exception_type, "Traceback" in flaky.stack) == ("ConnectionError", True)
    # No false escalation: retries handled by the graph are no contract breach.
    assert escalation_kinds(job) == []
    assert job.findings == []
    # LLM calls are first-class: provider, model, tokens, cost, the transcript.
    assert (job.provider, job.model) == ("openai", "gpt-4o-mini")
    (llm,) = Call.objects.filter(job=job, kind="llm")
    assert (llm.node_id, llm.attempt, llm.input_tokens, llm.output_tokens) == ("plan", 1, 1200, 30)
    assert float(llm.cost) == pytest.approx(1200 * 0.15e-6 + 30 * 0.6e-6)
    assert [(m["role"], m["content"]) for m in llm.messages] == [
        ("user", "Why was I charged twice?"),
        ("assistant", "Refund the order"),
    ]
    assert (job.input_tokens, job.output_tokens) == (1200, 30)
    # The tool failed, the node caught it: a tool execution is a step of its own, nested in
    # the node's, failed and handled (it makes no node failing); the node succeeded.
    lookup_step = Step.objects.get(job=job, node_id="lookup")
    use_tool = Step.objects.get(job=job, node_id="use_tool")
    assert (lookup_step.parent_span_id, lookup_step.handled) == (use_tool.trace_span_id, True)
    assert lookup_step.reason == "ValueError: lookup service down: 503"
    assert job.failing_node_id == ""
    (lookup,) = Call.objects.filter(job=job, kind="tool")
    assert (lookup.node_id, lookup.status, lookup.tool["name"]) == ("lookup", "error", "lookup")
    assert lookup.reason == "ValueError: lookup service down: 503"
    # The planner's span event counts like an event sent to /api/v1/events.
    parse_invalid = Counter.objects.get(
        name=counters.PARSE_INVALID,
        labels=counters.labels_key(provider="openai", model="gpt-4o-mini"),
    )
    assert parse_invalid.value == 1
    assert job.planner_parse_invalid == 1


class Loop(TypedDict):
    turns: int


def test_a_langgraph_agent_loop_streamed_span_by_span_grows_its_job(langchain_traced):
    """An agent and its tools taking turns, each node's span exported as it ends, after the LLM
    or tool call inside it: the job grows by each agent node (its calls move up a place, its
    name is numbered from the iterations read by name), is replayed whole only at its start,
    at each tools node (its tool's step waited for it) and at its root, and ends as a replay
    of the whole trace has it."""
    model = fake_model()
    model.responses = [AIMessage(content="look it up")] * 6

    @tool
    def lookup(query: str) -> str:
        """Look a customer up."""
        return "found"

    def agent(state: Loop):
        model.invoke([HumanMessage(content="next?")])
        return {"turns": state["turns"] + 1}

    def tools(state: Loop):
        lookup.invoke({"query": "customer"})
        return {}

    graph = StateGraph(Loop)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", lambda state: END if state["turns"] >= 5 else "tools")
    graph.add_edge("tools", "agent")
    assert graph.compile().invoke({"turns": 0})["turns"] == 5

    job = Job.objects.get()
    # The tool call in each tools node is a step of its own, nested in the node's.
    turns = taking_turns(5)[:-1]
    with_tools = [
        name
        for node in turns
        for name in ([node, node.replace("tools", "lookup")] if "tools" in node else [node])
    ]
    assert [node for node, _attempt, _result in steps_of(job)] == with_tools
    assert Call.objects.filter(job=job, kind="llm").count() == 5
    assert Call.objects.filter(job=job, kind="tool").count() == 4
    # Replayed whole: the first LLM call (a new job), the two spans after it while only calls
    # waiting for the first node were folded (LangGraph's runnable inside it, then the node),
    # each tools node (the parent its tool's step waited for) and the root. Every other span,
    # node or call, grew the job.
    assert counters.projections_by_path() == {"full": 8, "incremental": 16}
    assert parity.differences(job.job_id) == []


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def test_langgraph_parallel_branches_streamed_span_by_span_tell_the_truth(langchain_traced):
    """Two nodes of one superstep run at once (one retried by its RetryPolicy), then a node
    that joins them: each span exported as it ends, so a branch's node comes after the other
    branch's later spans. The job has both branches' steps in start order, the retry as an
    attempt, and the rows a replay of the whole trace gives."""
    model = fake_model()
    model.responses = [AIMessage(content="noted")] * 2
    failures = [ConnectionError("crm down")]

    def research(state: Notes):
        time.sleep(0.05)  # ends after the other branch's first attempt and its retry
        model.invoke([HumanMessage(content="research?")])
        return {"notes": ["research"]}

    def lookup(state: Notes):
        if failures:
            raise failures.pop()
        return {"notes": ["lookup"]}

    def write(state: Notes):
        model.invoke([HumanMessage(content="write?")])
        return {"notes": ["write"]}

    graph = StateGraph(Notes)
    graph.add_node("research", research)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionError)
    graph.add_node("lookup", lookup, retry_policy=retry)
    graph.add_node("write", write)
    graph.add_edge(START, "research")
    graph.add_edge(START, "lookup")
    graph.add_edge(["research", "lookup"], "write")
    graph.add_edge("write", END)
    assert graph.compile().invoke({"notes": []})["notes"][-1] == "write"

    job = Job.objects.get()
    assert job.status == "completed"
    assert sorted(steps_of(job)) == [
        ("lookup", 1, "retryable_failure"),
        ("lookup", 2, "success"),
        ("research", 1, "success"),
        ("write", 1, "success"),
    ]
    assert steps_of(job)[-1] == ("write", 1, "success")
    llm_calls = Call.objects.filter(job=job, kind="llm").order_by("position")
    assert [(c.node_id, c.kind) for c in llm_calls] == [
        ("research", "llm"),
        ("write", "llm"),
    ]
    assert parity.differences(job.job_id) == []
    assert escalation_kinds(job) == []


def test_langgraph_run_that_gives_up_fails_with_a_one_line_reason(langchain_traced):
    with pytest.raises(ConnectionError):
        agent_graph(fake_model(), flaky_failures=5).invoke(
            {"question": "Hi", "answer": "", "tries": 0}
        )

    job = Job.objects.get()
    assert job.status == "failed"
    assert steps_of(job)[-3:] == [
        ("flaky", 1, "retryable_failure"),
        ("flaky", 2, "retryable_failure"),
        ("flaky", 3, "permanent_failure"),
    ]
    assert (job.failing_node_id, job.failing_reason) == (
        "flaky",
        "ConnectionError: timeout talking to crm (try 3)",
    )
    assert "\n" not in job.finish_reason and "Traceback" not in job.finish_reason


# --- Celery through opentelemetry-instrumentation-celery ---------------------------------------


def charging_app(broker: str | None) -> Celery:
    """A producer's Celery app with a task that retries twice, then fails."""
    app = Celery(f"shop-{uuid.uuid4().hex[:6]}", broker=broker or "memory://")
    app.conf.update(
        task_always_eager=broker is None,
        task_eager_propagates=False,
        task_default_queue=f"shop-{uuid.uuid4().hex[:8]}",
        result_backend=None,
    )

    @app.task(bind=True, name="shop.charge", max_retries=2, default_retry_delay=0)
    def charge(self, order: str):
        raise self.retry(exc=ConnectionError(f"gateway timeout for {order}"))

    return app


def test_celery_task_that_retries_twice_then_fails(exporting):
    provider = exporting("shop-worker")
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        app = charging_app(REDIS_URL or None)
        if REDIS_URL:
            from celery.contrib.testing.worker import start_worker

            with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
                app.tasks["shop.charge"].apply_async(("order-7",))
                wait_for(lambda: Job.objects.filter(status="failed").exists())
        else:
            # Eager: no message crosses a broker, so the caller's own span is the root.
            with provider.get_tracer("shop").start_as_current_span("checkout", context=Context()):
                app.tasks["shop.charge"].apply_async(("order-7",))
    finally:
        instrumentor.uninstrument()

    job = Job.objects.get()
    assert steps_of(job) == [
        ("shop.charge", 1, "retryable_failure"),
        ("shop.charge", 2, "retryable_failure"),
        ("shop.charge", 3, "permanent_failure"),
    ]
    first = Step.objects.get(job=job, attempt=1)
    assert first.reason.startswith("Retry in 0s: ConnectionError('gateway timeout for order-7')")
    last = Step.objects.get(job=job, attempt=3)
    assert last.reason == "ConnectionError: gateway timeout for order-7"
    if REDIS_URL:
        # The job is the published message: it finishes with the last run's failure.
        assert (job.status, job.name) == ("failed", "apply_async/shop.charge")
    # A restart would run the task again: it never completed.
    assert job.completed_node_ids == []
    assert "contract_violation" not in escalation_kinds(job)


def wait_for(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# --- plain OpenTelemetry ------------------------------------------------------------------------


def test_plain_sdk_trace_with_nesting_loops_a_handled_retry_events_and_a_link(exporting):
    tracer = exporting("etl").get_tracer("etl")
    # Each trace starts from an empty context: an instrumentation an earlier test used may
    # have left one current in this thread.
    with tracer.start_as_current_span("nightly-import", context=Context()) as other:
        other_trace = other.get_span_context()
    with tracer.start_as_current_span(
        "sync-contacts", context=Context(), links=[_link(other_trace)]
    ) as root:
        for page in range(3):
            with tracer.start_as_current_span("fetch_page") as fetch:
                fetch.add_event("page fetched", {"page": page, "rows": 100})
        with tracer.start_as_current_span("write_crm"):
            for attempt in range(2):
                try:
                    with tracer.start_as_current_span("upsert_batch"):
                        if attempt == 0:
                            raise TimeoutError("crm timed out")
                    break
                except TimeoutError:
                    continue
        trace_id = format(root.get_span_context().trace_id, "032x")

    job = Job.objects.get(job_id=trace_id)
    assert job.status == "completed"
    assert steps_of(job) == [
        ("fetch_page", 1, "success"),
        ("fetch_page #2", 1, "success"),
        ("fetch_page #3", 1, "success"),
        ("write_crm", 1, "success"),
        ("upsert_batch", 1, "retryable_failure"),
        ("upsert_batch", 2, "success"),
    ]
    upsert = Step.objects.get(job=job, node_id="upsert_batch", attempt=1)
    write = Step.objects.get(job=job, node_id="write_crm")
    assert upsert.parent_span_id == write.trace_span_id  # nested in the waterfall
    assert upsert.reason == "TimeoutError: crm timed out"
    page_two = Step.objects.get(job=job, node_id="fetch_page #2")
    assert [(e["name"], e["attributes"]) for e in page_two.span["events"]] == [
        ("page fetched", {"page": 1, "rows": 100})
    ]
    other_job = format(other_trace.trace_id, "032x")
    assert job.metadata["otel.trace_id"] == trace_id
    assert Job.objects.filter(job_id=other_job).exists()
    assert escalation_kinds(job) == []


def test_a_run_still_going_is_running_and_grows_span_by_span(exporting):
    """The SDK exports each span as it ends, the root last: while the run goes on, traceviz
    shows it running with the steps so far (their parent is in the same process, so it is
    coming), folds each new span onto the job instead of replaying the trace, and says nothing
    of steps "after the finish". An LLM call exported before its step is the job's call until
    the step comes and takes it: no step of its own comes and goes."""
    tracer = exporting("agent").get_tracer("agent")
    projected = {}
    with tracer.start_as_current_span("research", context=Context()) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        for turn in range(4):
            with (
                tracer.start_as_current_span("agent"),
                tracer.start_as_current_span("ChatOpenAI") as llm,
            ):
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.model_name", "gpt-4o-mini")
                llm.set_attribute("llm.token_count.prompt", 100 + turn)
            with tracer.start_as_current_span("tools"):
                pass
        job = Job.objects.get(job_id=trace_id)
        projected.update(counters.projections_by_path())
        assert (job.status, job.name, job.findings) == ("running", "", [])
        assert [node for node, _attempt, _result in steps_of(job)] == taking_turns(4)
        assert job.input_tokens == 406
    job = Job.objects.get(job_id=trace_id)
    assert (job.status, job.name, job.model) == ("completed", "research", "gpt-4o-mini")
    # 12 spans before the root, one request each: the first LLM call makes a new job (it is
    # the job's call while its step runs), its step replays it (nothing was folded yet), the
    # other 10 grow it: each later LLM call waits for its step, which then adopts it.
    assert projected == {"full": 2, "incremental": 10}
    assert Call.objects.filter(job=job).count() == 4
    assert escalation_kinds(job) == []


def test_a_job_named_on_its_root_alone_holds_the_children_exported_before_it(exporting, client):
    """A SimpleSpanProcessor exports each span as it ends, the root last: the children arrive
    under the trace id, the root names the job, and the trace is re-homed whole into it."""
    tracer = exporting("release").get_tracer("release")
    with tracer.start_as_current_span(
        "release", context=Context(), attributes={"traceviz.job_id": "release-7"}
    ) as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        for node in ("build", "test", "upload"):
            with tracer.start_as_current_span(node):
                pass
        assert list(Job.objects.values_list("job_id", flat=True)) == [trace_id]
    assert list(Job.objects.values_list("job_id", flat=True)) == ["release-7"]
    job = Job.objects.get()
    assert (job.status, job.name, job.workflow) == ("completed", "release", "release")
    assert steps_of(job) == [
        ("build", 1, "success"),
        ("test", 1, "success"),
        ("upload", 1, "success"),
    ]
    assert parity.differences("release-7") == []
    client.force_login(User.objects.create_user("erin", is_staff=True))
    response = client.get(f"/jobs/{trace_id}/?step=test:1")
    assert (response.status_code, response["Location"]) == (302, "/jobs/release-7/?step=test:1")


def _link(context):
    from opentelemetry.trace import Link

    return Link(context)
