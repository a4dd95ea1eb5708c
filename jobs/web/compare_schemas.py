"""The compare API's answer (``GET /api/v1/compare``): its pydantic models, from which the
OpenAPI document takes its schema, and the builder of its JSON, which writes plain values
without a model instance per node (docs/compare.md).
"""

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import PlainSerializer, WithJsonSchema

from jobs import models
from jobs.replay import compare
from jobs.replay.failures import SEGMENT_BY_RESULT_TYPE, RunStatus, Segment
from jobs.web.schemas import Body, Timestamp, Usd

# A difference of two costs: as ``Usd``, but it may be negative.
UsdDelta = Annotated[
    Decimal,
    PlainSerializer(lambda amount: f"{amount:.8f}", return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^-?[0-9]+\.[0-9]{8}$",
            "description": "USD, a decimal string with 8 decimal places (negative: less)",
        }
    ),
]


class ComparedRun(Body):
    """One of the two runs compared."""

    job_id: str
    status: RunStatus
    workflow: str
    started_at: Timestamp | None

    @classmethod
    def from_job(cls, job: models.Job) -> "ComparedRun":
        return cls(
            job_id=job.job_id,
            status=RunStatus(job.status),
            workflow=job.workflow,
            started_at=job.started_at,
        )


class NodeSide(Body):
    """A node in one run: its latest attempt not ignored as stale, and its attempts' totals."""

    attempts: int
    final_attempt: int
    result_type: str | None
    """The latest attempt's; null while it has not finished."""
    segment: Segment
    reason: str
    failure_code: str
    error_type: str
    duration_ms: float | None
    """All its attempts (a duration not sent is read off the start and finish)."""
    models: list[str]
    """The models its calls used, ``provider/model``, sorted."""
    input_tokens: int
    output_tokens: int
    cost: Usd | None


class KeyChange(Body):
    """A top-level key whose value differs: ``added`` in a only, ``removed`` in b only."""

    key: str
    status: Literal["changed", "added", "removed"]
    a: str
    """The value in a, as JSON ("" when a has no such key)."""
    b: str
    text_diff: list[str]
    """A unified diff from b to a of a long or multi-line value; empty for short ones."""


ChangeName = Literal["same", "changed", "new_failure", "fixed", "only_in_a", "only_in_b"]
FacetName = Literal["result", "arguments", "payload_results", "model", "definition"]


class ComparedNode(Body):
    """One node of either run, in the aligned order."""

    node_id: str
    change: ChangeName
    """``new_failure``: fails in a, not in b; ``fixed``: fails in b, not in a; ``changed``:
    a facet differs; ``only_in_a``/``only_in_b``: one run never ran it."""
    differences: list[FacetName]
    """The facets that differ, in this order (the first one is a divergence's kind)."""
    a: NodeSide | None
    b: NodeSide | None
    arguments: list[KeyChange]
    """Actual arguments, the keys that differ."""
    expected_arguments: list[KeyChange]
    payload_results: list[KeyChange]
    definition: list[KeyChange]
    """The step definition, the keys that differ."""
    slower: bool
    """a took more than twice as long as b, and more than a second longer."""
    duration_delta_ms: float | None
    input_tokens_delta: int
    output_tokens_delta: int
    cost_delta: UsdDelta | None


class Divergence(Body):
    node_id: str
    kind: Literal[
        "result", "arguments", "payload_results", "model", "definition", "only_in_a", "only_in_b"
    ]


class ComparisonTotals(Body):
    """a's totals minus b's, over every call (the job's own too)."""

    input_tokens_delta: int
    output_tokens_delta: int
    cost_delta: UsdDelta | None
    """null when neither run has a priced call."""


class Comparison(Body):
    """Two runs node by node: a, the run looked into, against b."""

    a: ComparedRun
    b: ComparedRun
    b_picked: str | None
    """How b was chosen when the request named none; null when it did."""
    first_divergence: Divergence | None
    """The first node, in a's event order, whose result, arguments, payload results, model or
    step definition differ, or that only one run has; null when none does."""
    totals: ComparisonTotals
    nodes: list[ComparedNode]


def comparison_body(
    comparison: compare.Comparison, a: models.Job, b: models.Job, b_picked: str | None
) -> dict[str, Any]:
    """The ``Comparison`` answer as plain JSON values, built without a model instance per node
    (three instances per node were most of a big comparison's time: bench/README.md).
    The keys are the models' (``test_openapi_document`` validates answers against the document
    the models generate)."""
    first = comparison.first_divergence
    return {
        "a": ComparedRun.from_job(a).model_dump(mode="json"),
        "b": ComparedRun.from_job(b).model_dump(mode="json"),
        "b_picked": b_picked,
        "first_divergence": {"node_id": first.node_id, "kind": first.kind} if first else None,
        "totals": {
            "input_tokens_delta": comparison.input_tokens_delta,
            "output_tokens_delta": comparison.output_tokens_delta,
            "cost_delta": _usd(comparison.cost_delta),
        },
        "nodes": [_compared_node(node) for node in comparison.nodes],
    }


def _usd(amount: Decimal | None) -> str | None:
    return None if amount is None else f"{amount:.8f}"


# A node side's segment by its result type ("running": not finished), one lookup.
_SEGMENTS = {
    **{result.value: segment.value for result, segment in SEGMENT_BY_RESULT_TYPE.items()},
    compare.RUNNING: Segment.RUNNING.value,
}


def _compared_node(node: compare.NodeComparison) -> dict[str, Any]:
    """``ComparedNode`` as JSON values."""
    return {
        "node_id": node.node_id,
        "change": node.change.value,
        "differences": [facet.value for facet in node.differences],
        "a": _node_side(node.a),
        "b": _node_side(node.b),
        "arguments": _key_changes(node.arguments()),
        "expected_arguments": _key_changes(node.expected_arguments()),
        "payload_results": _key_changes(node.payload_results()),
        "definition": _key_changes(node.definition()),
        "slower": node.slower,
        "duration_delta_ms": node.duration_delta_ms,
        "input_tokens_delta": node.input_tokens_delta,
        "output_tokens_delta": node.output_tokens_delta,
        "cost_delta": _usd(node.cost_delta),
    }


def _node_side(side: compare.NodeSide | None) -> dict[str, Any] | None:
    """``NodeSide`` as JSON values."""
    if side is None:
        return None
    return {
        "attempts": side.attempts,
        "final_attempt": side.final_attempt,
        "result_type": None if side.result_type == compare.RUNNING else side.result_type,
        "segment": _SEGMENTS.get(side.result_type, Segment.RUNNING.value),
        "reason": side.reason,
        "failure_code": side.failure_code,
        "error_type": side.error_type,
        "duration_ms": side.duration_ms,
        "models": list(side.models),
        "input_tokens": side.input_tokens,
        "output_tokens": side.output_tokens,
        "cost": _usd(side.cost),
    }


def _key_changes(rows: list[compare.KeyChange]) -> list[dict[str, Any]]:
    """``KeyChange`` rows as JSON values."""
    return [
        {
            "key": row.key,
            "status": row.status.value,
            "a": row.a,
            "b": row.b,
            "text_diff": list(row.text_diff),
        }
        for row in rows
    ]
