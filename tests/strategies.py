"""Hypothesis strategies: whole jobs' event streams in the event contract (docs/contract.md).

Timestamps are drawn from a small range so ties are common: ties exercise the rest of the event
order (seq, type rank, attempt, event_id)."""

from hypothesis import strategies as st

from tests.factories import ts

NODES = ("n1", "n2", "n3")
RESULT_TYPES = (
    None,
    "success",
    "success",
    "retryable_failure",
    "permanent_failure",
    "compensatable_failure",
)
ERROR_TYPES = (
    "auth",
    "permission",
    "network",
    "logic",
    "internal",
    "TransientError",
    "ValidationError",
    "PermanentError",
    "BoundaryViolation",
    "Unheard",
)
EVENT_KINDS = (
    ["node_started"] * 4
    + ["node_finished"] * 8
    + [
        "job_started",
        "compensation_finished",
        "cancel_requested",
        "job_finished",
        "state_checkpointed",
        "graph.next_step.parse_invalid",
        "graph.next_step.degraded",
        "escalation_raised",
        "custom.thing",
    ]
)


def _maybe(draw, strategy, payload: dict, name: str) -> None:
    if draw(st.booleans()):
        payload[name] = draw(strategy)


@st.composite
def payload_for(draw, kind: str) -> dict:
    node = st.sampled_from(NODES)
    attempt = st.integers(1, 7)
    payload: dict = {}
    if kind == "job_started":
        payload = {"name": "job", "provider": "prov", "model": "mod"}
        _maybe(draw, st.sampled_from(["p1"]), payload, "plan_hash")
    elif kind == "node_started":
        payload = {"node_id": draw(node), "attempt": draw(attempt)}
        _maybe(draw, st.integers(0, 3), payload, "epoch")
    elif kind == "node_finished":
        payload = {"node_id": draw(node), "attempt": draw(attempt)}
        result_type = draw(st.sampled_from(RESULT_TYPES))
        if result_type is not None:
            payload["result_type"] = result_type
        if result_type not in (None, "success"):
            payload["reason"] = draw(st.sampled_from(["boom", "network timeout"]))
            _maybe(draw, st.sampled_from(ERROR_TYPES), payload, "error_type")
            _maybe(
                draw,
                st.sampled_from(["adapter_timeout", "provider_terminal", "odd"]),
                payload,
                "failure_code",
            )
            if draw(st.integers(0, 5)) == 0:
                payload["continue_on_error"] = True
        _maybe(draw, st.sampled_from(["done", "indeterminate"]), payload, "state")
        _maybe(draw, st.integers(0, 3), payload, "epoch")
        _maybe(draw, st.sampled_from(["p1", "p2"]), payload, "plan_hash")
        _maybe(
            draw,
            st.dictionaries(st.sampled_from("abc"), st.integers(0, 9), max_size=2),
            payload,
            "payload_results",
        )
    elif kind == "compensation_finished":
        payload = {
            "node_id": draw(node),
            "result_type": draw(st.sampled_from(["success", "permanent_failure"])),
        }
    elif kind == "cancel_requested":
        payload = {"reason": "operator"}
        _maybe(draw, st.integers(1, 3), payload, "epoch")
    elif kind == "job_finished":
        payload = {"status": draw(st.sampled_from(["completed", "failed", "cancelled"]))}
    elif kind == "state_checkpointed":
        payload = {"node_id": draw(node), "state": "indeterminate"}
    elif kind.startswith("graph.next_step."):
        payload = {"provider": "prov", "model": "mod", "attempt": 1, "attempts": 2}
    elif kind == "escalation_raised":
        payload = {"kind": "custom", "message": "look", "severity": "low"}
        _maybe(draw, node, payload, "node_id")
    else:
        payload = {"anything": draw(st.integers(0, 3))}
    return payload


@st.composite
def job_events(draw, job_id: str = "j1", min_size: int = 1, max_size: int = 14) -> list[dict]:
    """One job's events as producers send them, in generation order (not event order)."""
    count = draw(st.integers(min_size, max_size))
    items = []
    for index in range(count):
        kind = draw(st.sampled_from(EVENT_KINDS))
        item = {
            "type": kind,
            "job_id": job_id,
            "ts": ts(draw(st.integers(0, 8))),
            "payload": draw(payload_for(kind)),
        }
        if draw(st.integers(0, 3)) == 0:
            item["seq"] = draw(st.integers(0, 2))
        if draw(st.integers(0, 4)) > 0:  # else the default id: a hash of the event as sent
            item["event_id"] = f"{job_id}-e{index}"
        items.append(item)
    return items


PIPELINE = ("extract", "transform", "load", "report")


@st.composite
def pipeline_run(draw, job_id: str) -> list[dict]:
    """One run of a small pipeline whose nodes carry what a comparison reads: arguments, a step
    definition, payload results, retries and failures. Ties in ts are common."""
    items = [
        {
            "type": "job_started",
            "job_id": job_id,
            "ts": ts(0),
            "payload": {"workflow": "etl", "name": "nightly"},
        }
    ]
    at = 0
    for node in PIPELINE:
        if draw(st.integers(0, 5)) == 0:
            continue  # this run never ran the node
        context = {
            "expected_arguments": {"table": "orders"},
            "actual_arguments": {"table": draw(st.sampled_from(["orders", "orders_v2"]))},
            "step_definition": {"rules": draw(st.sampled_from(["v12", "v13"]))},
        }
        for attempt in range(1, draw(st.integers(1, 2)) + 1):
            at += draw(st.integers(0, 1))
            items.append(
                {
                    "type": "node_started",
                    "job_id": job_id,
                    "ts": ts(at),
                    "payload": {"node_id": node, "attempt": attempt},
                }
            )
            at += draw(st.integers(0, 2))
            payload: dict = {"node_id": node, "attempt": attempt, "context": context}
            result_type = draw(st.sampled_from(RESULT_TYPES))
            if result_type is not None:
                payload["result_type"] = result_type
            if result_type not in (None, "success"):
                payload["reason"] = draw(st.sampled_from(["duplicate key (id)=(7)", "timeout"]))
            _maybe(draw, st.floats(0, 5000, allow_nan=False), payload, "duration_ms")
            _maybe(
                draw,
                st.dictionaries(st.sampled_from(["rows", "file"]), st.integers(0, 3), max_size=2),
                payload,
                "payload_results",
            )
            items.append(
                {"type": "node_finished", "job_id": job_id, "ts": ts(at), "payload": payload}
            )
    if draw(st.booleans()):
        status = draw(st.sampled_from(["completed", "failed"]))
        items.append(
            {"type": "job_finished", "job_id": job_id, "ts": ts(at), "payload": {"status": status}}
        )
    for index, item in enumerate(items):
        if draw(st.integers(0, 4)) > 0:  # else the default id: a hash of the event as sent
            item["event_id"] = f"{job_id}-e{index}"
    return items


def comparable_runs(a: str = "a", b: str = "b"):
    """Two runs of the same pipeline (``pipeline_run``), as two event lists."""
    return st.tuples(pipeline_run(a), pipeline_run(b))
