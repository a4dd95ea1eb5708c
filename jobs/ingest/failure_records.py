"""One failure record per failure (docs/failures.md), written by projection in the fold's
transaction with the job's other rows: ``Failure`` rows and the providers each job used
(``JobProvider``).

Three kinds of failure, each with a reason, the provider/model that failed and a failure group:
a failed step attempt (a grouped step, ``signatures.is_grouped``; the group is its Step row's),
a job-level failure (``job_finished`` failed with a reason or code that no failed step already
gives) and the planner's degradation (``graph.next_step.degraded``). A step failure is
*recovered* when a later attempt of its node succeeded.

A full replay rewrites a job's records whole. An incremental fold rewrites the step failures
of the nodes its changed steps belong to (the fold read every step of those nodes), and the job
and planner failures only when they changed; so its cost grows with the batch. Every record
counts in its group against the provider/model that failed (``failure_groups``): ``write``
returns what the records it replaced and wrote change there.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from jobs.contract.events import Event
from jobs.ingest import database, failure_groups
from jobs.models import PLANNER_EVENT_TYPES, Call, Failure, JobProvider, search_text
from jobs.replay import signatures
from jobs.replay.calls import CallRecord
from jobs.replay.failures import FAILED_FAMILY, Segment
from jobs.replay.signatures import Signature, is_grouped
from jobs.replay.state import JobState, StepState

# The error type of a planner degradation's signature: it keeps the planner's groups apart from
# a job-level failure with the same reason.
PLANNER_SIGNATURE_TYPE = "graph.next_step.degraded"
NON_STEP = (Failure.Kind.JOB, Failure.Kind.PLANNER)
# The columns that make a job or planner failure row, compared to decide whether to rewrite it.
COMPARED = ("kind", "reason", "failure_code", "error_type", "provider", "model", "at", "group_id")


@dataclass(frozen=True, slots=True)
class JobFailure:
    """A job or planner failure of a replayed state, before its group is known."""

    kind: str
    reason: str
    failure_code: str
    error_type: str
    provider: str
    model: str
    at: datetime | None
    signature: Signature


def job_failures(state: JobState, step_reasons: set[str] | None = None) -> list[JobFailure]:
    """The job-level and planner failures of a replayed job; ``step_reasons``: the reasons of
    all its step failures, when ``state`` holds only some of its steps (a resumed fold)."""
    attrs = state.attributes
    workflow = attrs.get("workflow", "")
    found = []
    planner = state.last_validation_error
    if isinstance(planner, dict) and planner:
        reason = str(planner.get("reason") or "")
        found.append(
            JobFailure(
                kind=Failure.Kind.PLANNER,
                reason=reason,
                failure_code="",
                error_type="",
                provider=str(planner.get("provider") or ""),
                model=str(planner.get("model") or ""),
                at=state.last_event_at,
                signature=signatures.make(workflow, "", "", PLANNER_SIGNATURE_TYPE, reason),
            )
        )
    if step_reasons is None:
        step_reasons = {step.reason or "" for step in state.steps if is_grouped(step)}
    if says_job_failure(state) and state.finish_reason not in step_reasons:
        found.append(
            JobFailure(
                kind=Failure.Kind.JOB,
                reason=state.finish_reason,
                failure_code=state.finish_code,
                error_type="",
                provider=attrs.get("provider", ""),
                model=attrs.get("model", ""),
                at=state.finished_at or state.last_event_at,
                signature=signatures.make(workflow, "", state.finish_code, "", state.finish_reason),
            )
        )
    return found


def says_job_failure(state: JobState) -> bool:
    """Whether the job ended failed saying why (a reason or code): a job-level failure, unless
    one of its step failures gives that reason."""
    return state.status in FAILED_FAMILY and bool(state.finish_code or state.finish_reason)


def _recovered(step: StepState, node_steps: list[StepState]) -> bool:
    return any(
        other.attempt > step.attempt and other.segment == Segment.OK and not other.ignored_stale
        for other in node_steps
    )


@dataclass(frozen=True, slots=True)
class FailedCall:
    """What a step failure needs of a failed call that names its provider or model."""

    span_id: str
    node_id: str
    attempt: int | None
    position: int
    provider: str
    model: str


def failed_calls(calls: Iterable[CallRecord]) -> list[FailedCall]:
    return [
        FailedCall(
            call.span_id, call.node_id, call.attempt, call.position, call.provider, call.model
        )
        for call in calls
        if call.status == "error" and (call.provider or call.model)
    ]


def _stored_failed_calls(nodes: dict[int, set[str]]) -> dict[int, list[FailedCall]]:
    """The failed calls stored for these nodes (by job pk) that name a provider or model, by
    job pk: one query, by the calls' (job, node) index."""
    pairs = [(pk, node) for pk, job_nodes in nodes.items() for node in sorted(job_nodes)]
    found: dict[int, list[FailedCall]] = {}
    if not pairs:
        return found
    rows = (
        Call.objects.filter(database.pairs_in(Call, ("job", "node_id"), pairs), status="error")
        .exclude(provider="", model="")
        .values_list("job_id", "span_id", "node_id", "attempt", "position", "provider", "model")
    )
    for pk, span_id, node_id, attempt, position, provider, model in rows:
        found.setdefault(pk, []).append(
            FailedCall(span_id, node_id, attempt, position, provider, model)
        )
    return found


def _failed_call(node_id: str, attempt: int, calls: Iterable[FailedCall]) -> tuple[str, str] | None:
    """The provider/model of the step's failed call that came last (by position)."""
    failed = [c for c in calls if c.node_id == node_id and c.attempt in (None, attempt)]
    if not failed:
        return None
    last = max(failed, key=lambda call: call.position)
    return last.provider, last.model


def step_rows(
    job_pk: int,
    state: JobState,
    nodes: set[str] | None,
    group_ids: dict[tuple, int],
    calls: list[FailedCall] | None = None,
) -> list[Failure]:
    """The step failures of ``nodes`` (every node for None) of a replayed job; ``calls``: the
    failed calls that name a provider (those of ``state`` when None, as after a full replay)."""
    calls = failed_calls(state.calls) if calls is None else calls
    by_node: dict[str, list[StepState]] = {}
    for step in state.steps:
        if nodes is None or step.node_id in nodes:
            by_node.setdefault(step.node_id, []).append(step)
    rows = []
    for node_steps in by_node.values():
        for step in node_steps:
            if not is_grouped(step):
                continue
            # Empty when no failed call names one: the job's, read from its row (a later
            # job_started may name it, and a fold does not rewrite the other nodes' rows).
            provider, model = _failed_call(step.node_id, step.attempt, calls) or ("", "")
            rows.append(
                Failure(
                    job_id=job_pk,
                    kind=Failure.Kind.STEP,
                    node_id=step.node_id,
                    attempt=step.attempt,
                    reason=step.reason or "",
                    search_text=search_text(step.reason),
                    failure_code=step.failure_code or "",
                    error_type=step.error_type or step.exception_type or "",
                    provider=provider,
                    model=model,
                    group_id=group_ids.get((job_pk, step.node_id, step.attempt)),
                    at=failure_groups.seen_at(step.started_at, step.finished_at),
                    recovered=_recovered(step, node_steps),
                    handled=bool(step.handled or step.continue_on_error),
                )
            )
    return rows


def _step_reasons(folded: dict[int, JobState]) -> dict[int, set[str]]:
    """By job pk, the reasons of a folded job's step failures: those of the steps the fold
    loaded (their rows are rewritten), and the stored ones of its other nodes. Read (in one
    query) only for the jobs that ended failed saying why, the only ones that ask; the others
    get their loaded steps' reasons."""
    reasons = {
        pk: {step.reason or "" for step in state.steps if is_grouped(step)}
        for pk, state in folded.items()
    }
    asking = {pk: state for pk, state in folded.items() if says_job_failure(state)}
    if asking:
        loaded = {pk: {step.node_id for step in state.steps} for pk, state in asking.items()}
        stored = Failure.objects.filter(job_id__in=sorted(asking), kind=Failure.Kind.STEP)
        for pk, node_id, reason in stored.values_list("job_id", "node_id", "reason"):
            if node_id not in loaded[pk]:
                reasons[pk].add(reason)
    return reasons


def _name_providers(
    nodes: dict[int, set[str]],
    new_calls: dict[int, list[FailedCall]],
    changes: dict[int, "Changes | None"],
) -> None:
    """The step failures of nodes (by job pk) whose steps this fold left alone, given the
    provider of a failed call that came after them (a failure counts in its group against that
    provider: the job's ``changes`` get the move, unless its contributions are recounted
    whole)."""
    nodes = {pk: job_nodes - {""} for pk, job_nodes in nodes.items()}
    nodes = {pk: job_nodes for pk, job_nodes in nodes.items() if job_nodes}
    if not nodes:
        return
    stored = _stored_failed_calls(nodes)
    pairs = [(pk, node) for pk, job_nodes in nodes.items() for node in sorted(job_nodes)]
    rows = Failure.objects.filter(
        database.pairs_in(Failure, ("job", "node_id"), pairs), kind=Failure.Kind.STEP
    )
    calls: dict[int, dict[str, FailedCall]] = {}
    for pk, job_nodes in nodes.items():
        calls[pk] = {c.span_id: c for c in stored.get(pk, [])}
        calls[pk].update((c.span_id, c) for c in new_calls[pk] if c.node_id in job_nodes)
    for row in rows:
        found = _failed_call(row.node_id, row.attempt, calls[row.job_id].values())
        provider, model = found or ("", "")
        if (row.provider, row.model) != (provider, model):
            change = changes[row.job_id]
            if change is not None:
                change.take_out(row)
            Failure.objects.filter(pk=row.pk).update(provider=provider, model=model)
            row.provider, row.model = provider, model
            if change is not None:
                change.put_in(row)


@dataclass(slots=True)
class Changes:
    """One job's failure records as its groups count them, taken out and put in (each against
    the provider/model that failed, its own else ``job``'s)."""

    contributions: failure_groups.Contributions
    job_pk: int
    job: tuple[str, str]

    def take_out(self, row: Failure) -> None:
        self._add(row, -1)

    def put_in(self, row: Failure) -> None:
        self._add(row, +1)

    def _add(self, row: Failure, sign: int) -> None:
        if row.group_id is not None:
            provider = failure_groups.failed_on(row.provider, row.model, self.job)
            self.contributions.add(row.group_id, self.job_pk, row.at, sign, provider)


# The columns of a step failure its group counts it by.
COUNTED = ("group_id", "at", "provider", "model")


def _replace_steps(old: list[Failure], new: list[Failure], changes: Changes | None) -> None:
    """Count the rewritten step failures of a fold's nodes: those whose group, time or provider
    changed (or that came or went) move in their groups; the others are neither taken out nor
    put back, so they are not "seen again"."""
    if changes is None:
        return
    before = {(row.node_id, row.attempt): row for row in old}
    after = {(row.node_id, row.attempt): row for row in new}
    for key in sorted(before.keys() | after.keys()):
        was, now = before.get(key), after.get(key)
        if was is not None and now is not None and _counted(was) == _counted(now):
            continue
        if was is not None:
            changes.take_out(was)
        if now is not None:
            changes.put_in(now)


def _counted(row: Failure) -> tuple:
    return tuple(getattr(row, name) for name in COUNTED)


def _job_row(job_pk: int, failure: JobFailure, group_id: int) -> Failure:
    return Failure(
        job_id=job_pk,
        kind=failure.kind,
        reason=failure.reason,
        search_text=search_text(failure.reason),
        failure_code=failure.failure_code,
        error_type=failure.error_type,
        provider=failure.provider,
        model=failure.model,
        group_id=group_id,
        at=failure.at,
    )


def write(
    projected: dict,
    existing: dict[str, dict],
    ids: dict[tuple, int],
    step_groups: dict[tuple, int],
) -> failure_groups.Contributions:
    """Write the failure records of these projected jobs (``projection.Projected`` by job id);
    returns what they change in their failure groups (``failure_groups.apply``). A fully
    replayed job's, and a job whose own provider/model changed (its failures that name none
    count against it), are counted whole: their stored contributions are taken out and every
    record put in; a fold's only as its records change."""
    contributions = failure_groups.Contributions()
    full = {ids[(job_id,)]: p for job_id, p in projected.items() if p.path == "full"}
    folded = {ids[(job_id,)]: p for job_id, p in projected.items() if p.path != "full"}
    own = {ids[(job_id,)]: _own(p.state) for job_id, p in projected.items()}
    relabeled = {
        pk
        for pk, job_id in ((ids[(job_id,)], job_id) for job_id, p in projected.items())
        if pk in folded and (existing[job_id]["provider"], existing[job_id]["model"]) != own[pk]
    }
    contributions.replaced.update(
        ids[(job_id,)] for job_id, p in projected.items() if p.path == "full" and job_id in existing
    )
    contributions.replaced.update(relabeled)
    changes = {
        pk: None if pk in relabeled else Changes(contributions, pk, own[pk])
        for pk in full.keys() | folded.keys()
    }
    wanted = {pk: job_failures(p.state) for pk, p in full.items()}
    reasons = _step_reasons({pk: p.state for pk, p in folded.items()})
    wanted.update((pk, job_failures(p.state, reasons[pk])) for pk, p in folded.items())
    group_ids = failure_groups.ensure_groups(
        {
            failure.signature.fingerprint: (failure.signature, pk, failure.kind, failure.at)
            for pk, failures in wanted.items()
            for failure in failures
        }
    )
    stored: dict[int, list[Failure]] = {}
    if folded:
        for row in Failure.objects.filter(job_id__in=sorted(folded), kind__in=NON_STEP):
            stored.setdefault(row.job_id, []).append(row)
    rows: list[Failure] = []
    if full:
        Failure.objects.filter(job_id__in=sorted(full)).delete()
        for pk, p in full.items():
            rows.extend(step_rows(pk, p.state, None, step_groups))
    changed = {pk: {step.node_id for step in p.state.changed_steps} for pk, p in folded.items()}
    # The provider of a failure is its last failed call's, which may have been stored by an
    # earlier batch, or come in this one after its step (a trace in any order).
    stored_calls = _stored_failed_calls(changed)
    new_calls = {pk: failed_calls(p.state.calls) for pk, p in folded.items()}
    pairs: list[tuple[int, str]] = []
    new_steps: dict[int, list[Failure]] = {}
    for pk, p in folded.items():
        nodes = changed[pk]
        pairs.extend((pk, node) for node in sorted(nodes))
        # The node's steps the fold read but did not change keep the group their row has.
        groups = {
            (pk, node, attempt): found[0] for (node, attempt), found in p.stored_groups.items()
        }
        calls = {c.span_id: c for c in stored_calls.get(pk, [])}
        calls.update((c.span_id, c) for c in new_calls[pk])
        new_steps[pk] = step_rows(
            pk, p.state, nodes, {**groups, **step_groups}, list(calls.values())
        )
        rows.extend(new_steps[pk])
    _name_providers(
        {pk: {c.node_id for c in calls} - changed[pk] for pk, calls in new_calls.items()},
        new_calls,
        changes,
    )
    if pairs:
        in_pairs = database.pairs_in(Failure, ("job", "node_id"), pairs)
        old_steps: dict[int, list[Failure]] = {}
        for row in Failure.objects.filter(in_pairs, kind=Failure.Kind.STEP).only(
            "job_id", "node_id", "attempt", *COUNTED
        ):
            old_steps.setdefault(row.job_id, []).append(row)
        Failure.objects.filter(pk__in=[r.pk for old in old_steps.values() for r in old]).delete()
        for pk in folded:
            _replace_steps(old_steps.get(pk, []), new_steps.get(pk, []), changes[pk])
    stale = []
    for pk, failures in wanted.items():
        new = [_job_row(pk, f, group_ids[f.signature.fingerprint]) for f in failures]
        old = stored.get(pk, [])
        if pk in folded and _values(old) == _values(new):
            continue
        change = changes[pk]
        for row in old:
            if change is not None:
                change.take_out(row)
            stale.append(row.pk)
        rows.extend(new)
    Failure.objects.filter(pk__in=stale).delete()
    Failure.objects.bulk_create(rows)
    for row in rows:
        change = changes[row.job_id]
        if change is not None and (row.job_id in full or row.kind != Failure.Kind.STEP):
            change.put_in(row)
    if relabeled:
        recounted = Failure.objects.filter(job_id__in=sorted(relabeled), group__isnull=False)
        for row in recounted.only("job_id", *COUNTED):
            Changes(contributions, row.job_id, own[row.job_id]).put_in(row)
    return contributions


def _own(state: JobState) -> tuple[str, str]:
    return state.attributes.get("provider", ""), state.attributes.get("model", "")


def _values(rows: list[Failure]) -> list[tuple]:
    return sorted(tuple(str(getattr(row, name)) for name in COMPARED) for row in rows)


def write_providers(
    projected: dict, ids: dict[tuple, int], events_by_job: dict[str, list[Event]]
) -> None:
    """Record the providers/models each job used: its own (``job_started``'s, else its first
    planner event's), its planner events', its calls'. A full replay rewrites a job's set; a
    fold adds what its new events and calls name."""
    full: list[int] = []
    rows: list[JobProvider] = []
    for job_id, p in projected.items():
        pk = ids[(job_id,)]
        attrs = p.state.attributes
        used = {(attrs.get("provider", ""), attrs.get("model", ""))}
        used.update((call.provider, call.model) for call in p.state.calls)
        for event in events_by_job.get(job_id, ()):
            if event.type in PLANNER_EVENT_TYPES and event.type != "job_started":
                payload = event.payload
                used.add((_text(payload.get("provider")), _text(payload.get("model"))))
        if p.path == "full":
            full.append(pk)
        rows.extend(
            JobProvider(job_id=pk, provider=provider[:200], model=model[:200])
            for provider, model in sorted(used)
            if provider or model
        )
    if full:
        JobProvider.objects.filter(job_id__in=sorted(full)).delete()
    JobProvider.objects.bulk_create(rows, ignore_conflicts=True)


def _text(value) -> str:
    return value if isinstance(value, str) else ""
