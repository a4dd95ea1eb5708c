"""Replay parity (docs/architecture.md): a job's stored Job, Step, Call and Escalation rows against
``walk.build`` over its stored events.

Used by ``manage.py check_parity``, by the load and fault benchmarks after a run and by tests.
The expected rows come from the same row builders the projection writes with, so a difference
means the rows are stale or were written from a different set of events (a lost update, a race
between batches), not that two copies of the column mapping drifted apart.
"""

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.serializers.json import DjangoJSONEncoder

from jobs.ingest import failure_groups, failure_records, projection
from jobs.models import Event as EventRow
from jobs.models import Failure, FailureGroupJob, Job, search_text
from jobs.replay import rules, signatures, walk
from jobs.replay.state import JobState

# Not a function of the events: when the latest batch arrived (the stall clock), and its hour.
JOB_FIELDS_NOT_REPLAYED = frozenset({"last_received_at", "received_hour"})


@dataclass(frozen=True, slots=True)
class Difference:
    """One value that differs: ``where`` is "job", "step <node>:<attempt>" or "escalations"."""

    job_id: str
    where: str
    field: str
    stored: object
    replayed: object

    def __str__(self) -> str:
        stored, replayed = (getattr(v, "value", v) for v in (self.stored, self.replayed))
        return f"{self.job_id} {self.where} {self.field}: stored {stored!r}, replayed {replayed!r}"


def _same(stored: object, replayed: object) -> bool:
    if isinstance(stored, dict | list) or isinstance(replayed, dict | list):
        # JSON columns come back through a JSON round trip (tuples become lists and so on).
        encode = json.dumps
        return encode(stored, cls=DjangoJSONEncoder, sort_keys=True) == encode(
            replayed, cls=DjangoJSONEncoder, sort_keys=True
        )
    return stored == replayed


def differences(job_id: str) -> list[Difference]:
    """Every difference between ``job_id``'s rows and a replay of its stored events; empty when
    they agree. A job with events but no Job row (or a row but no events) is one difference."""
    events = projection.load_events([job_id])[job_id]
    job = Job.objects.filter(job_id=job_id).first()
    if job is None or not events:
        return [Difference(job_id, "job", "(row)", job is not None, bool(events))]
    fold = walk.Fold.of(events, projection.replay_config())
    state = fold.finish()
    found = []
    expected_job = projection.job_row(
        state, job.last_received_at, fold.snapshot(), job.partition_day
    )
    for name, value in expected_job.items():
        if name in JOB_FIELDS_NOT_REPLAYED:
            continue
        stored = getattr(job, name)
        if not _same(stored, value):
            found.append(Difference(job_id, "job", name, stored, value))
    stored_steps = {(s.node_id, s.attempt): s for s in job.steps.select_related("failure_group")}
    replayed_steps = {(s.node_id, s.attempt): s for s in state.steps}
    for key in sorted(stored_steps.keys() | replayed_steps.keys()):
        where = f"step {key[0]}:{key[1]}"
        if key not in stored_steps or key not in replayed_steps:
            found.append(
                Difference(job_id, where, "(row)", key in stored_steps, key in replayed_steps)
            )
            continue
        row = stored_steps[key]
        expected = projection.step_row(replayed_steps[key], job.pk, job.partition_day)
        for name, value in expected.items():
            if name != "job_id" and not _same(getattr(row, name), value):
                found.append(Difference(job_id, where, name, getattr(row, name), value))
        found.extend(_group_difference(job, where, row, replayed_steps[key], state))
    found.extend(_group_job_differences(job, stored_steps.values()))
    found.extend(_failure_differences(job, state))
    found.extend(_call_differences(job, state))
    # All of a job's rows share its partition day (the unique keys rely on it).
    days = set(EventRow.objects.filter(job_id=job_id).values_list("partition_day", flat=True))
    if days != {job.partition_day}:
        found.append(Difference(job_id, "events", "partition_day", sorted(days), job.partition_day))
    found.extend(_escalation_differences(job, state))
    return found


FAILURE_FIELDS = (
    "reason",
    "search_text",
    "failure_code",
    "error_type",
    "provider",
    "model",
    "at",
    "recovered",
    "handled",
)


def _failure_differences(job: Job, state: JobState) -> list[Difference]:
    """The job's Failure rows are its replayed failures: every grouped step, its job-level and
    planner failures, each with its group (by signature)."""
    step_groups = {
        (job.pk, s.node_id, s.attempt): s.failure_group_id
        for s in job.steps.exclude(failure_group=None).only("node_id", "attempt", "failure_group")
    }
    replayed: dict[tuple[str, str, int], Failure | failure_records.JobFailure] = {
        (row.kind, row.node_id, row.attempt): row
        for row in failure_records.step_rows(job.pk, state, None, step_groups)
    }
    expected_groups = failure_groups.group_ids(
        failure.signature.fingerprint for failure in failure_records.job_failures(state)
    )
    for failure in failure_records.job_failures(state):
        replayed[(failure.kind, "", 0)] = failure
    stored = {(row.kind, row.node_id, row.attempt): row for row in job.failures.all()}
    found = []
    for key in sorted(stored.keys() | replayed.keys()):
        where = f"failure {key[0]} {key[1]}:{key[2]}"
        if key not in stored or key not in replayed:
            found.append(Difference(job.job_id, where, "(row)", key in stored, key in replayed))
            continue
        row, want = stored[key], replayed[key]
        for name in FAILURE_FIELDS:
            value = getattr(want, name, None)
            if name == "search_text":
                value = search_text(want.reason)
            if name in ("recovered", "handled") and value is None:
                value = False
            if not _same(getattr(row, name), value):
                found.append(Difference(job.job_id, where, name, getattr(row, name), value))
        signature = getattr(want, "signature", None)
        if signature is not None and row.group_id != expected_groups.get(signature.fingerprint):
            found.append(
                Difference(
                    job.job_id,
                    where,
                    "group",
                    row.group_id,
                    expected_groups.get(signature.fingerprint),
                )
            )
        elif isinstance(want, Failure) and row.group_id != want.group_id:
            found.append(Difference(job.job_id, where, "group", row.group_id, want.group_id))
    return found


def _call_differences(job: Job, state: JobState) -> list[Difference]:
    """The job's Call rows are the calls of its replayed trace, field by field."""
    stored = {call.span_id: call for call in job.calls.all()}
    replayed = {call.span_id: projection.call_row(call, job.pk) for call in state.calls}
    found = []
    for span_id in sorted(stored.keys() | replayed.keys()):
        where = f"call {span_id}"
        if span_id not in stored or span_id not in replayed:
            found.append(
                Difference(job.job_id, where, "(row)", span_id in stored, span_id in replayed)
            )
            continue
        for name, value in replayed[span_id].items():
            if name != "job_id" and not _same(getattr(stored[span_id], name), value):
                found.append(
                    Difference(job.job_id, where, name, getattr(stored[span_id], name), value)
                )
    return found


def _group_difference(job: Job, where: str, row, step, state: JobState) -> list[Difference]:
    """The stored step's failure group is the one the replayed step's signature leads to (its
    fingerprint's, through the fingerprint map: a merge points it at the surviving group)."""
    expected = signatures.signature(step, state.attributes.get("workflow", ""))
    fingerprint = expected.fingerprint if expected else None
    group_id = failure_groups.group_ids([fingerprint]).get(fingerprint) if fingerprint else None
    if row.failure_group_id == group_id:
        return []
    stored = row.failure_group.fingerprint if row.failure_group else None
    return [Difference(job.job_id, where, "failure_group", stored, fingerprint)]


def _group_job_differences(job: Job, rows) -> list[Difference]:
    """The job's (group, job, provider, model) rows count its failure records, each against
    the provider/model that failed (its own, else the job's); its grouped steps are its step
    failure records."""
    steps: Counter = Counter()
    for row in rows:
        if row.failure_group_id is not None:
            steps[row.failure_group_id] += 1
    expected: Counter = Counter()
    recorded: Counter = Counter()
    own = (job.provider, job.model)
    for group_id, kind, provider, model in job.failures.exclude(group=None).values_list(
        "group_id", "kind", "provider", "model"
    ):
        expected[(group_id, *failure_groups.failed_on(provider, model, own))] += 1
        if kind == Failure.Kind.STEP:
            recorded[group_id] += 1
    stored = Counter(
        {
            (group_id, provider, model): count
            for group_id, provider, model, count in FailureGroupJob.objects.filter(
                job=job
            ).values_list("group_id", "provider", "model", "step_count")
        }
    )
    found = []
    if steps != recorded:
        found.append(Difference(job.job_id, "failure groups", "grouped steps", steps, recorded))
    if stored != expected:
        found.append(
            Difference(job.job_id, "failure groups", "(group, job, provider)", stored, expected)
        )
    return found


def _escalation_differences(job: Job, state: JobState) -> list[Difference]:
    """Every (kind, node) replay triggers has a row, and no unresolved state-kind row is left
    that replay does not trigger (those are withdrawn: resolved by the system)."""
    rows = list(job.escalations.all())
    stored = {(esc.kind, esc.node_id) for esc in rows}
    triggered = state.triggered
    leftover = {
        (esc.kind, esc.node_id)
        for esc in rows
        if esc.kind in rules.STATE_KINDS
        and esc.status != esc.Status.RESOLVED
        and (esc.kind, esc.node_id) not in triggered
    }
    missing = triggered - stored
    if not missing and not leftover:
        return []
    return [
        Difference(job.job_id, "escalations", "(kind, node)", sorted(leftover), sorted(missing))
    ]


def mismatched_jobs(job_ids: Iterable[str]) -> dict[str, list[Difference]]:
    """``differences`` for each job, keeping only the jobs that have some."""
    found = {job_id: differences(job_id) for job_id in job_ids}
    return {job_id: diffs for job_id, diffs in found.items() if diffs}
