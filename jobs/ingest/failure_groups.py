"""Failure groups kept up to date by projection (docs/architecture.md), inside the batch's
transaction: never computed per page view.

Every grouped failure record (``Failure``: a failed step, a job-level failure, a planner
degradation) is a *contribution* to its group, counted against the provider/model that failed
(``failed_on``: the record's own, else its job's): to the (group, job, provider, model) row's
count, to the (group, hour of the failure, provider, model) row's, to the (group, day, ...)
row's (the hour rows summed per day, for long windows) and to the group's first/last seen.
Projection (``failure_records.write``) subtracts the contributions of the records it replaces
(all of a fully replayed job's, and of a job whose own provider/model changed; the changed
ones of an incremental fold) and adds those of the records it writes; retention subtracts
those of the jobs it deletes. So the counts are the same as counting the records afresh
(``differences`` checks it), whichever path wrote them.

Shared rows (a group's totals, its hours) are updated in group order, so two batches touching
the same groups wait for each other instead of deadlocking.

A fingerprint leads to its group through FailureFingerprint (grouping version + fingerprint):
``ensure_groups`` looks it up, else finds the group an earlier grouping version's fingerprint
of the same failure leads to, else makes a group. ``merge`` moves a group's failures into
another and points its fingerprints there, so later failures land in the survivor.
``apply`` returns the failures that are new to each group (the net of what it added and took
out): what the lifecycle (``escalations.group_lifecycle.note_seen``) counts as "seen again";
a rebuild, which takes out and puts back the same failures, sees nothing new.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Q

from jobs.escalations import group_lifecycle
from jobs.ingest import database
from jobs.models import (
    Failure,
    FailureFingerprint,
    FailureGroup,
    FailureGroupDay,
    FailureGroupHour,
    FailureGroupJob,
    Job,
    Step,
    hour_floor,
)
from jobs.replay import signatures
from jobs.replay.signatures import Signature, signature
from jobs.replay.state import StepState

HOUR_FORMAT = "%Y-%m-%dT%H"


def seen_at(started_at: datetime | None, finished_at: datetime | None) -> datetime | None:
    """When a failure was seen (event time): its finish, else its start."""
    return finished_at or started_at


def hour_key(at: datetime | None) -> str:
    """The key of a failure's hour in ``FailureGroupJob.hours``: "2026-11-20T10", "" for none."""
    return hour_floor(at).strftime(HOUR_FORMAT) if at is not None else ""


def hour_of_key(key: str) -> datetime:
    # fromisoformat reads HOUR_FORMAT's text forty times faster than strptime.
    return datetime.fromisoformat(key).replace(tzinfo=UTC)


def failed_on(provider: str, model: str, job: tuple[str, str]) -> tuple[str, str]:
    """The provider/model a failure counts against: its own (the failed call's, the degraded
    planner's), else ``job``'s when it names neither (the dashboard's failure rate by provider
    reads failures the same way)."""
    return (provider, model) if provider or model else job


@dataclass(slots=True)
class Contributions:
    """Signed failure counts by (group, job, hour key, provider, model) (the provider/model
    that failed, ``failed_on``), the seen times of the added failures by group, and the jobs
    whose stored contributions are all taken out (a full replay, a change of the job's own
    provider/model, a deletion)."""

    cells: Counter = field(default_factory=Counter)
    seen: dict[int, list[datetime]] = field(default_factory=dict)
    replaced: set[int] = field(default_factory=set)
    # The latest seen time of the added failures by (group, job).
    latest: dict[tuple[int, int], datetime] = field(default_factory=dict)

    def add(
        self,
        group_id: int,
        job_pk: int,
        at: datetime | None,
        sign: int,
        provider: tuple[str, str],
    ) -> None:
        self.cells[(group_id, job_pk, hour_key(at), *provider)] += sign
        if at is not None and sign > 0:
            self.seen.setdefault(group_id, []).append(at)
            pair = (group_id, job_pk)
            if pair not in self.latest or at > self.latest[pair]:
                self.latest[pair] = at

    def __bool__(self) -> bool:
        return bool(self.cells or self.replaced)


@dataclass(frozen=True, slots=True)
class Seen:
    """Failures new to a group in one job: how many, and the latest one's time (event time)."""

    count: int
    at: datetime | None


def assign_groups(
    steps_by_job: dict[int, tuple[str, Iterable[StepState]]],
) -> dict[tuple[int, str, int], int]:
    """Create the groups of these steps that do not exist yet; returns each grouped step's
    group id by (job pk, node, attempt). ``steps_by_job``: job pk -> (its job_id's workflow,
    the steps about to be written)."""
    wanted: dict[str, tuple[Signature, int, str, datetime | None]] = {}
    keys: dict[tuple[int, str, int], str] = {}
    for job_pk, (workflow, steps) in steps_by_job.items():
        for step in steps:
            found = signature(step, workflow)
            if found is None:
                continue
            fingerprint = found.fingerprint
            keys[(job_pk, step.node_id, step.attempt)] = fingerprint
            wanted.setdefault(
                fingerprint,
                (
                    found,
                    job_pk,
                    f"{step.node_id}:{step.attempt}",
                    seen_at(step.started_at, step.finished_at),
                ),
            )
    ids = ensure_groups(wanted)
    return {key: ids[fingerprint] for key, fingerprint in keys.items()}


def ensure_groups(wanted: dict[str, tuple[Signature, int, str, datetime | None]]) -> dict[str, int]:
    """The group id of each of these fingerprints (of the current grouping version), from
    their (signature, example job pk, example, seen at): the group the fingerprint leads to;
    else the group one of the signature's earlier-version fingerprints leads to (the new
    fingerprint then leads there too); else a new group."""
    if not wanted:
        return {}
    version = signatures.GROUPING_VERSION
    ids = _mapped(version, list(wanted))
    missing = sorted(set(wanted) - ids.keys())
    if not missing:
        return ids
    adopted = _adopted({fingerprint: wanted[fingerprint][0] for fingerprint in missing})
    new = [fingerprint for fingerprint in missing if fingerprint not in adopted]
    if new:
        FailureGroup.objects.bulk_create(
            [_group(fingerprint, *wanted[fingerprint]) for fingerprint in new],
            ignore_conflicts=True,
        )
        adopted.update(
            FailureGroup.objects.filter(fingerprint__in=new).values_list("fingerprint", "id")
        )
    FailureFingerprint.objects.bulk_create(
        [
            FailureFingerprint(version=version, fingerprint=fingerprint, group_id=group_id)
            for fingerprint, group_id in sorted(adopted.items())
        ],
        ignore_conflicts=True,
    )
    # Another batch may have mapped the same fingerprint first: the map decides.
    ids.update(_mapped(version, missing))
    return ids


def _mapped(version: int, fingerprints: list[str]) -> dict[str, int]:
    return dict(
        FailureFingerprint.objects.filter(
            version=version, fingerprint__in=fingerprints
        ).values_list("fingerprint", "group_id")
    )


def _adopted(missing: dict[str, Signature]) -> dict[str, int]:
    """The group each of these signatures' earlier-version fingerprints leads to (the newest
    version that has one), by current fingerprint; signatures of no earlier group are left
    out."""
    pairs = {pair for found in missing.values() for pair in found.earlier}
    if not pairs:
        return {}
    condition = Q()
    for version, fingerprint in sorted(pairs):
        condition |= Q(version=version, fingerprint=fingerprint)
    known = {
        (version, fingerprint): group_id
        for version, fingerprint, group_id in FailureFingerprint.objects.filter(
            condition
        ).values_list("version", "fingerprint", "group_id")
    }
    adopted = {}
    for fingerprint, found in missing.items():
        for pair in found.earlier:
            if pair in known:
                adopted[fingerprint] = known[pair]
                break
    return adopted


def group_ids(fingerprints: Iterable[str]) -> dict[str, int]:
    """The group each of these current-version fingerprints leads to now (read only: replay
    parity's expected groups)."""
    return _mapped(signatures.GROUPING_VERSION, sorted(set(fingerprints)))


def _group(
    fingerprint: str, found: Signature, job_pk: int, example: str, at: datetime | None
) -> FailureGroup:
    return FailureGroup(
        fingerprint=fingerprint,
        workflow=found.workflow,
        node_id=found.node_id,
        failure_code=found.failure_code,
        error_type=found.error_type,
        reason=found.reason,
        example_job_id=job_pk,
        example_step=example,
        first_seen=at,
        last_seen=at,
    )


def apply(contributions: Contributions) -> dict[tuple[int, int], Seen]:
    """Write the contributions: (group, job, provider, model) rows, hour and day rows and group
    totals; returns, by (group, job), the failures the contributions added to it net of those
    they took out, where that is more than none. A replaced job's stored rows are subtracted
    whole first. Of the other jobs only the rows of the (group, job) pairs the cells change
    are read: a long job has rows for every group it failed in, and a batch must not read them
    all (docs/architecture.md)."""
    cells = Counter(contributions.cells)
    replaced = contributions.replaced
    current = _stored(FailureGroupJob.objects.filter(job_id__in=sorted(replaced)))
    for (group_id, job_pk, provider, model), previous in current.items():
        for key, count in previous.hours.items():
            cells[(group_id, job_pk, key, provider, model)] -= count
    by_row: dict[tuple[int, int, str, str], Counter] = {}
    for (group_id, job_pk, key, provider, model), delta in cells.items():
        if delta:
            by_row.setdefault((group_id, job_pk, provider, model), Counter())[key] += delta
    pairs = sorted({(row[0], row[1]) for row in by_row if row[1] not in replaced})
    if pairs:
        in_pairs = database.pairs_in(FailureGroupJob, ("group", "job"), pairs)
        current.update(_stored(FailureGroupJob.objects.filter(in_pairs)))
    step_deltas: Counter = Counter()
    hour_deltas: Counter = Counter()
    # Of each (group, job) pair: whether it had failures before, and has after.
    had: dict[tuple[int, int], bool] = {}
    has: dict[tuple[int, int], bool] = {}
    created: list[FailureGroupJob] = []
    gone, changed = [], []
    for key in sorted(by_row.keys() | current.keys()):
        group_id, job_pk, provider, model = key
        deltas = by_row.get(key, Counter())
        row = current.get(key)
        counted = Counter(row.hours if row else {})
        counted.update(deltas)
        hours = {hour: count for hour, count in sorted(counted.items()) if count > 0}
        step_deltas[group_id] += sum(deltas.values())
        for hour, delta in deltas.items():
            if hour and delta:
                hour_deltas[(group_id, hour_of_key(hour), provider, model)] += delta
        pair = (group_id, job_pk)
        had[pair] = had.get(pair, False) or row is not None
        has[pair] = has.get(pair, False) or bool(hours)
        if row is None:
            if hours:
                created.append(
                    FailureGroupJob(
                        group_id=group_id,
                        job_id=job_pk,
                        provider=provider,
                        model=model,
                        step_count=sum(hours.values()),
                        hours=hours,
                    )
                )
        elif not hours:
            gone.append(row.pk)
        elif row.hours != hours:
            row.hours, row.step_count = hours, sum(hours.values())
            changed.append(row)
    FailureGroupJob.objects.bulk_create(created)
    FailureGroupJob.objects.filter(pk__in=gone).delete()
    FailureGroupJob.objects.bulk_update(changed, ["step_count", "hours"])
    job_deltas: Counter = Counter()
    for pair, present in has.items():
        job_deltas[pair[0]] += int(present) - int(had[pair])
    totals = []
    for group_id in sorted(job_deltas.keys() | step_deltas.keys() | contributions.seen.keys()):
        times = contributions.seen.get(group_id)
        first, last = (min(times), max(times)) if times else (None, None)
        if job_deltas[group_id] or step_deltas[group_id] or times:
            totals.append((group_id, job_deltas[group_id], step_deltas[group_id], first, last))
    database.add_to_totals(FailureGroup, totals)
    hours = {key: delta for key, delta in sorted(hour_deltas.items()) if delta}
    database.add_to_counts(
        FailureGroupHour, ("group_id", "hour", "provider", "model"), "step_count", hours
    )
    database.add_to_counts(
        FailureGroupDay, ("group_id", "day", "provider", "model"), "step_count", by_day(hours)
    )
    net: Counter = Counter()
    for (group_id, job_pk, _, _), deltas in by_row.items():
        net[(group_id, job_pk)] += sum(deltas.values())
    return {
        pair: Seen(count, contributions.latest.get(pair))
        for pair, count in sorted(net.items())
        if count > 0
    }


def merge(source: FailureGroup, target: FailureGroup, actor=None) -> None:
    """Merge ``source`` into ``target``: its failures (Step and Failure rows, (group, job)
    rows, hour and day rows, totals) move to ``target``, its fingerprints lead there, so a
    failure that would have been ``source``'s lands in ``target``, and it is marked merged with
    an audit entry on both. What moves is not "seen again": it regresses nothing. Raises
    ``group_lifecycle.GroupActionError`` when the merge does not apply."""
    group_lifecycle.check_merge(source, target)
    with transaction.atomic():
        # In group order, as every batch locks them.
        locked = {
            group.pk: group
            for group in FailureGroup.objects.select_for_update()
            .filter(pk__in=sorted((source.pk, target.pk)))
            .order_by("pk")
        }
        source, target = locked[source.pk], locked[target.pk]
        group_lifecycle.check_merge(source, target)
        contributions = Contributions()
        for row in FailureGroupJob.objects.filter(group=source).order_by("job_id"):
            for key, count in row.hours.items():
                contributions.cells[(source.pk, row.job_id, key, row.provider, row.model)] -= count
                contributions.cells[(target.pk, row.job_id, key, row.provider, row.model)] += count
        seen = [moment for moment in (source.first_seen, source.last_seen) if moment]
        if seen:
            contributions.seen[target.pk] = seen
        apply(contributions)
        Step.objects.filter(failure_group=source).update(failure_group=target)
        Failure.objects.filter(group=source).update(group=target)
        FailureFingerprint.objects.filter(group=source).update(group=target)
        group_lifecycle.mark_merged(source, target, actor=actor)


def _stored(rows) -> dict[tuple[int, int, str, str], FailureGroupJob]:
    return {(row.group_id, row.job_id, row.provider, row.model): row for row in rows}


def by_day(hours: dict[tuple, int]) -> dict[tuple, int]:
    """(group, UTC hour, provider, model) counts summed into (group, day, provider, model), in
    key order (shared rows are updated in group order: see the module docstring)."""
    days: Counter = Counter()
    for (group_id, hour, provider, model), count in hours.items():
        days[(group_id, hour.date(), provider, model)] += count
    return {key: count for key, count in sorted(days.items()) if count}


def forget_jobs(job_pks: list[int]) -> None:
    """Take these jobs' failures out of their groups (retention, before deleting them)."""
    if not job_pks:
        return
    apply(Contributions(replaced=set(job_pks)))


def recount() -> None:
    """Recompute every group's totals and hour rows from the (group, job, provider, model)
    rows, which a full replay of each job rewrites exactly (``rebuild_projections`` calls this
    last, so a rebuild also repairs tampered totals). Locks every group first: concurrent
    batches wait."""
    with transaction.atomic():
        list(FailureGroup.objects.select_for_update().order_by("pk").values_list("pk"))
        jobs: dict[int, set[int]] = {}
        steps: Counter = Counter()
        by_hour: Counter = Counter()
        for group_id, job_pk, hours, provider, model in FailureGroupJob.objects.values_list(
            "group_id", "job_id", "hours", "provider", "model"
        ):
            jobs.setdefault(group_id, set()).add(job_pk)
            steps[group_id] += sum(hours.values())
            for key, count in hours.items():
                if key:
                    by_hour[(group_id, hour_of_key(key), provider, model)] += count
        groups = list(FailureGroup.objects.only("pk", "job_count", "step_count"))
        for group in groups:
            group.job_count, group.step_count = len(jobs.get(group.pk, ())), steps[group.pk]
        FailureGroup.objects.bulk_update(groups, ["job_count", "step_count"], batch_size=500)
        FailureGroupHour.objects.all().delete()
        FailureGroupHour.objects.bulk_create(
            [
                FailureGroupHour(
                    group_id=group_id, hour=hour, provider=provider, model=model, step_count=count
                )
                for (group_id, hour, provider, model), count in sorted(by_hour.items())
            ],
            batch_size=1000,
        )
        FailureGroupDay.objects.all().delete()
        FailureGroupDay.objects.bulk_create(
            [
                FailureGroupDay(
                    group_id=group_id, day=day, provider=provider, model=model, step_count=count
                )
                for (group_id, day, provider, model), count in by_day(by_hour).items()
            ],
            batch_size=1000,
        )


# --- checks ------------------------------------------------------------------------------


def differences() -> list[str]:
    """Every stored count that differs from counting the failure records afresh, each against
    the provider/model that failed (``failed_on``): (group, job, provider, model) rows with
    their hours, hour rows, day rows, group totals; and the grouped Step rows that differ from
    the step failure records (each grouped step is one). Empty when they agree."""
    jobs = {
        pk: (provider, model)
        for pk, provider, model in Job.objects.values_list("pk", "provider", "model")
    }
    cells: Counter = Counter()
    step_cells: Counter = Counter()
    rows = Failure.objects.filter(group__isnull=False).values_list(
        "job_id", "group_id", "at", "provider", "model", "kind"
    )
    for job_pk, group_id, at, provider, model, kind in rows:
        cells[(group_id, job_pk, *failed_on(provider, model, jobs[job_pk]), hour_key(at))] += 1
        if kind == Failure.Kind.STEP:
            step_cells[(group_id, job_pk, hour_key(at))] += 1
    found = []
    grouped_steps = Counter(
        (group_id, job_pk, hour_key(seen_at(started_at, finished_at)))
        for job_pk, group_id, started_at, finished_at in Step.objects.filter(
            failure_group__isnull=False
        ).values_list("job_id", "failure_group_id", "started_at", "finished_at")
    )
    for key in sorted(grouped_steps.keys() | step_cells.keys()):
        if grouped_steps.get(key) != step_cells.get(key):
            found.append(f"grouped steps {key}: {grouped_steps.get(key)} != {step_cells.get(key)}")
    expected: dict[tuple[int, int, str, str], dict] = {}
    by_hour: Counter = Counter()
    for (group_id, job_pk, provider, model, key), count in sorted(cells.items()):
        expected.setdefault((group_id, job_pk, provider, model), {})[key] = count
        if key:
            by_hour[(group_id, hour_of_key(key), provider, model)] += count
    stored = {
        key: (row.step_count, row.hours)
        for key, row in _stored(FailureGroupJob.objects.all()).items()
    }
    for key in sorted(stored.keys() | expected.keys()):
        hours = expected.get(key)
        want = (sum(hours.values()), hours) if hours else None
        if stored.get(key) != want:
            found.append(f"group job {key}: {stored.get(key)} != {want}")
    stored_hours = {
        (group_id, hour.astimezone(UTC), provider, model): count
        for group_id, hour, provider, model, count in FailureGroupHour.objects.values_list(
            "group_id", "hour", "provider", "model", "step_count"
        )
        if count
    }
    for key in sorted(stored_hours.keys() | by_hour.keys()):
        if stored_hours.get(key) != by_hour.get(key):
            found.append(f"group hour {key}: {stored_hours.get(key)} != {by_hour.get(key)}")
    stored_days = {
        (group_id, day, provider, model): count
        for group_id, day, provider, model, count in FailureGroupDay.objects.values_list(
            "group_id", "day", "provider", "model", "step_count"
        )
        if count
    }
    expected_days = by_day(dict(by_hour))
    for key in sorted(stored_days.keys() | expected_days.keys()):
        if stored_days.get(key) != expected_days.get(key):
            found.append(f"group day {key}: {stored_days.get(key)} != {expected_days.get(key)}")
    job_sets: dict[int, set[int]] = {}
    steps: Counter = Counter()
    for (group_id, job_pk, _provider, _model), hours in expected.items():
        job_sets.setdefault(group_id, set()).add(job_pk)
        steps[group_id] += sum(hours.values())
    for group_id, job_count, step_count in FailureGroup.objects.values_list(
        "id", "job_count", "step_count"
    ):
        want_totals = [len(job_sets.get(group_id, ())), steps[group_id]]
        if [job_count, step_count] != want_totals:
            found.append(f"group {group_id}: {[job_count, step_count]} != {want_totals}")
    return found
