"""Demo event streams: a realistic day of jobs covering every result type and run status.

Pure: returns event dicts in the event contract; ``load_demo`` sends them through the same
validation and ingest path as the API. Event ids are deterministic, so loading twice changes
nothing.
"""

import random
from datetime import datetime, timedelta
from typing import Any

WORKFLOWS = {
    "publish-release": ("build", "test", "upload", "announce"),
    "crm-sync": ("fetch_contacts", "dedupe", "write_crm"),
    "mail-digest": ("collect", "summarize", "gmail.send"),
    "fanout-export": ("plan", "shard-1", "shard-2", "shard-3", "merge"),
    "pdca": ("plan", "do", "check", "act"),
}
PROVIDERS = [("openai", "gpt-4.1"), ("anthropic", "claude-x"), ("google", "gemini-2.5")]


class Stream:
    """Builds one job's events with deterministic ids and increasing timestamps."""

    def __init__(self, job_id: str, start: datetime, rng: random.Random):
        self.job_id, self.now, self.rng = job_id, start, rng
        self.events: list[dict] = []

    def emit(self, event_type: str, gap_ms: float = 0, **payload) -> None:
        self.now += timedelta(milliseconds=gap_ms)
        self.events.append(
            {
                "type": event_type,
                "job_id": self.job_id,
                "event_id": f"demo-{self.job_id}-{len(self.events)}",
                "ts": self.now.isoformat().replace("+00:00", "Z"),
                "payload": payload,
            }
        )

    def start(self, workflow: str, provider: str, model: str, **extra) -> None:
        self.emit(
            "job_started",
            name=f"{workflow} run",
            workflow=workflow,
            correlation_id=f"corr-{self.job_id}",
            session_id=f"sess-{self.job_id[-4:]}",
            provider=provider,
            model=model,
            plan_hash="plan-a1b2c3",
            **extra,
        )

    def step(
        self,
        node_id: str,
        index: int,
        result_type: str = "success",
        attempt: int = 1,
        parent: str = "",
        duration: int | None = None,
        **payload,
    ) -> None:
        duration = self.rng.randint(40, 4000) if duration is None else duration
        span = f"{self.job_id}-{node_id}-{attempt}"
        common = {
            "node_id": node_id,
            "step_index": index,
            "attempt": attempt,
            "trace_span_id": span,
        }
        if parent:
            common["parent_span_id"] = parent
        self.emit("node_started", self.rng.randint(5, 900), **common)
        self.emit(
            "node_finished",
            duration,
            **common,
            duration_ms=duration,
            result_type=result_type,
            **payload,
        )


def _happy(stream: Stream, nodes, results=True) -> None:
    for index, node in enumerate(nodes):
        payload: dict[str, Any] = {"payload_results": {f"{node}_ok": True}} if results else {}
        stream.step(node, index, "success", state="done", **payload)


ETL_NODES = ("extract", "transform", "load", "report")
ETL_SQL = (
    "INSERT INTO orders (id, customer_id, total)\n"
    "SELECT id, customer_id, total FROM staging_orders\n"
    "WHERE day = :day\n"
)


def etl_run(job_id: str, start: datetime, rules: str) -> list[dict]:
    """One run of the nightly ETL: with ``rules`` "v12" it completes, writing 118,500 rows; with
    "v13" the transform writes 120,000 rows (a rule keeps late duplicates) and the load fails
    on a duplicate key. The pair is the compare page's example (docs/compare.md)."""
    good = rules == "v12"
    stream = Stream(job_id, start, random.Random(job_id))
    stream.start("nightly-etl", "openai", "gpt-4.1", metadata={"rules": rules})
    stream.step(
        "extract",
        0,
        duration=1800,
        payload_results={"source_rows": 121_340},
        context={
            "expected_arguments": {"source": "s3://lake/orders/", "day": "yesterday"},
            "actual_arguments": {"source": "s3://lake/orders/", "day": "yesterday"},
            "step_definition": {"tool": "s3_read", "format": "parquet"},
        },
    )
    stream.step(
        "transform",
        1,
        duration=2400 if good else 2600,
        payload_results={"rows_written": 118_500 if good else 120_000, "table": "staging_orders"},
        context={
            "expected_arguments": {"rules": "v12", "dedupe_on": ["id"]},
            "actual_arguments": {"rules": rules, "dedupe_on": ["id"] if good else ["id", "day"]},
            "step_definition": {"tool": "sql_transform", "sql": ETL_SQL},
        },
    )
    load_context = {
        "expected_arguments": {"table": "orders", "mode": "insert"},
        "actual_arguments": {"table": "orders", "mode": "insert"},
        "step_definition": {
            "tool": "pg_copy",
            "sql": ETL_SQL
            if good
            else ETL_SQL.replace("WHERE day = :day", "WHERE day >= :day - 1"),
        },
    }
    if good:
        stream.step(
            "load", 2, duration=1100, payload_results={"rows_loaded": 118_500}, context=load_context
        )
        stream.step("report", 3, duration=300, payload_results={"report": "orders-daily.pdf"})
        stream.emit("job_finished", 50, status="completed")
    else:
        stream.step(
            "load",
            2,
            "permanent_failure",
            duration=4200,
            failure_code="invariant_violation",
            error_type="PermanentError",
            reason='duplicate key value violates unique constraint "orders_pkey"\n'
            "DETAIL: Key (id)=(88412) already exists.",
            context=load_context,
        )
        stream.emit("job_finished", 50, status="failed", reason="load failed")
    return stream.events


def demo_streams(now: datetime, seed: int = 7) -> list[list[dict]]:
    """About sixty jobs over the 24 hours before ``now``, one list of events per job."""
    rng = random.Random(seed)
    streams: list[Stream] = []

    def new(job_id: str, hours_ago: float, workflow: str) -> Stream:
        provider, model = rng.choice(PROVIDERS)
        stream = Stream(job_id, now - timedelta(hours=hours_ago), rng)
        stream.start(workflow, provider, model)
        streams.append(stream)
        return stream

    for n in range(30):  # routine successes across the day
        workflow = rng.choice(list(WORKFLOWS))
        stream = new(f"{workflow}-{1000 + n}", rng.uniform(0.2, 23.5), workflow)
        _happy(stream, WORKFLOWS[workflow])
        stream.emit("job_finished", 50, status="completed")

    s = new("release-42", 2.5, "publish-release")  # retry, then permanent (step results)
    s.step("build", 0, payload_results={"artifact": "dist/app.tar.gz"}, state="done")
    s.step(
        "upload",
        1,
        "retryable_failure",
        reason="upload: network timeout after 30s",
        failure_code="adapter_timeout",
        error_type="network",
    )
    s.step(
        "upload",
        1,
        "permanent_failure",
        attempt=2,
        tool="s3_put",
        reason="upload: 404 bucket releases-eu not found",
        failure_code="provider_terminal",
        error_type="PermanentError",
        context={
            "expected_arguments": {"bucket": "releases-eu", "acl": "private"},
            "actual_arguments": {"bucket": "releases-eu", "acl": "public-read"},
            "step_definition": {"tool": "s3_put", "retries": 1},
        },
        audit_trail=[
            {"step": 0, "tool": "build", "status": "success"},
            {"step": 1, "tool": "s3_put", "status": "failed"},
        ],
    )

    s = new("release-43", 3.1, "publish-release")  # compensatable, compensated
    s.step("build", 0, payload_results={"release_id": 991})
    s.step(
        "upload",
        1,
        "compensatable_failure",
        reason="release 991 created, asset upload failed",
        failure_code="adapter_error",
    )
    s.emit(
        "compensation_finished",
        900,
        node_id="upload",
        result_type="success",
        reason="release 991 deleted",
    )

    s = new("fanout-7", 1.2, "fanout-export")  # cancel, a stale late result (fences)
    s.step("plan", 0)
    s.emit("node_started", 10, node_id="shard-1", epoch=1)
    s.emit("node_started", 0, node_id="shard-2", epoch=1)
    s.emit("node_finished", 2000, node_id="shard-1", epoch=1, payload_results={"rows": 10})
    s.emit("cancel_requested", 1000, reason="operator cancelled", epoch=2)
    s.emit("node_finished", 2000, node_id="shard-2", epoch=1, payload_results={"rows": 12})
    s.emit("job_finished", 1000, status="cancelled", reason="operator cancelled")

    s = new("fanout-8", 0.3, "fanout-export")  # cancelling: cancel sent, not finished yet
    s.step("plan", 0)
    s.emit("node_started", 10, node_id="shard-1", epoch=1)
    s.emit("cancel_requested", 1500, reason="deploy freeze", epoch=2)

    s = new("mail-5", 4.0, "mail-digest")  # token expired: needs a person (the run-status contract)
    s.step("collect", 0)
    s.step("summarize", 1)
    s.step(
        "gmail.send",
        2,
        "permanent_failure",
        error_type="auth",
        failure_code="provider_terminal",
        reason="Gmail.send: token expired",
        source="gmail-connector",
    )

    s = new("crm-9", 5.0, "crm-sync")  # permission denied
    s.step("fetch_contacts", 0)
    s.step(
        "write_crm",
        1,
        "permanent_failure",
        error_type="permission",
        failure_code="policy_denied",
        reason="CRM: 403 missing scope contacts.write",
    )

    s = new("crm-10", 0.1, "crm-sync")  # retrying now: paused:transient
    s.step(
        "fetch_contacts",
        0,
        "retryable_failure",
        error_type="network",
        failure_code="provider_retryable",
        reason="CRM: 503 Service Unavailable\nRetry-After: 30",
    )

    s = new("crm-11", 7.0, "crm-sync")  # retries exhausted: max_retries_exceeded
    for attempt in range(1, 8):
        s.step(
            "fetch_contacts",
            0,
            "retryable_failure",
            attempt=attempt,
            failure_code="adapter_timeout",
            reason=f"CRM: read timeout (attempt {attempt})",
        )

    s = new("release-44", 6.0, "publish-release")  # mutation indeterminate
    s.step("build", 0)
    s.step(
        "upload",
        1,
        "retryable_failure",
        state="indeterminate",
        failure_code="adapter_error",
        reason="upload: connection reset after PUT was sent; object may exist",
    )

    s = new("crm-12", 8.0, "crm-sync")  # unclassified error: our bug
    s.step("fetch_contacts", 0)
    s.step(
        "dedupe",
        1,
        "permanent_failure",
        error_type="KeyError",
        failure_code="invariant_violation",
        reason="KeyError: 'email'",
    )

    previous = ""
    for n in range(5):  # a logic error auto-fixed five times: repair budget exhausted
        s = new(f"pdca-fix-{n}", 12 - n, "pdca")
        if previous:
            s.events[0]["payload"]["retry_of"] = previous
        s.step("plan", 0)
        s.step(
            "do",
            1,
            "permanent_failure",
            error_type="logic",
            failure_code="validation_error",
            reason=f"script threw TypeError: undefined is not a function (fix {n})",
        )
        previous = s.job_id

    s = new("pdca-88", 1.5, "pdca")  # planner output invalid twice, degraded
    for attempt, (kind, preview) in enumerate(
        [("json_decode", '{"next_step": "deploy" "args": ...'), ("schema", '{"step": "deploy"}')],
        start=1,
    ):
        s.emit(
            "graph.next_step.parse_invalid",
            800,
            correlation_id=f"corr-{s.job_id}",
            cycle=3,
            attempt=attempt,
            provider="anthropic",
            model="claude-x",
            parse_error_type=kind,
            validation_errors=[f"{kind}: next_step invalid"],
            raw_output_preview=preview,
        )
    s.emit(
        "graph.next_step.degraded",
        0,
        correlation_id=f"corr-{s.job_id}",
        cycle=3,
        attempts=2,
        reason="next_step_parse_failed",
        provider="anthropic",
        model="claude-x",
        status="failed",
    )

    s = new("pdca-89", 0.8, "pdca")  # planner repaired on the second attempt
    s.emit(
        "graph.next_step.parse_invalid",
        500,
        correlation_id=f"corr-{s.job_id}",
        cycle=1,
        attempt=1,
        provider="openai",
        model="gpt-4.1",
        parse_error_type="json_decode",
        validation_errors=["Expecting value: line 1 column 1"],
        raw_output_preview="Sure! Here is the plan: api_key=sk-demo1234567890abcdefgh",
    )
    _happy(s, WORKFLOWS["pdca"])
    s.emit("job_finished", 100, status="completed")

    s = new("release-45", 9.0, "publish-release")  # boundary violation: plan hash mismatch
    s.step("build", 0)
    s.step(
        "upload",
        1,
        "permanent_failure",
        plan_hash="plan-ffff",
        error_type="BoundaryViolation",
        tool="write_file",
        reason="write_file: path validation failed: /etc/passwd is protected",
    )

    s = new("mail-6", 0.05, "mail-digest")  # running right now
    s.step("collect", 0)
    s.emit("node_started", 100, node_id="summarize", step_index=1, attempt=1)

    s = new("mail-7", 10.0, "mail-digest")  # producer raised an escalation, then finished failed
    s.step("collect", 0)
    s.emit(
        "escalation_raised",
        100,
        kind="quota",
        severity="high",
        node_id="collect",
        message="Mailbox quota at 98%: digests will start bouncing",
    )
    s.emit("job_finished", 100, status="failed", code="provider_terminal", reason="quota")

    s = new("crm-13", 11.0, "crm-sync")  # continue_on_error, then completed
    s.step("fetch_contacts", 0)
    s.step(
        "dedupe",
        1,
        "permanent_failure",
        continue_on_error=True,
        reason="dedupe: 3 records skipped (declared continue_on_error)",
    )
    s.step("write_crm", 2)
    s.emit("job_finished", 50, status="completed")

    s = new("billing-3", 14.0, "crm-sync")  # a producer bug: a step's side effect ran twice
    s.step("fetch_contacts", 0)
    s.step("write_crm", 1, payload_results={"charged": 1})
    s.step("write_crm", 1, attempt=2, payload_results={"charged": 2})
    s.emit("job_finished", 50, status="completed")

    s = new("mail-8", 13.0, "mail-digest")  # hostile and secret-bearing text, shown safely
    s.step(
        "collect",
        0,
        "permanent_failure",
        error_type="TransientError",
        reason="<script>alert(1)</script> upstream said: Authorization: Bearer abcdef0123456789xyz",
    )

    etl = [
        etl_run("etl-nightly-41", now - timedelta(hours=22), "v12"),
        etl_run("etl-nightly-42", now - timedelta(hours=0.6), "v13"),
    ]
    return [stream.events for stream in streams] + etl
