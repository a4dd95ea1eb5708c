"""Failure groups kept up to date by projection (docs/architecture.md), inside the batch's
transaction: never computed per page view.

Every grouped failure (``signatures.is_grouped``) is a *contribution* of one step to its group:
to the (group, job) row's step count, to the (group, hour of the failure) row's count, to the
(group, day) row's (the hour rows summed per day, for long windows) and to the group's
first/last seen. Projection subtracts the contributions of the Step rows it is about to
replace (all of a fully replayed job's, the changed ones of an incremental fold) and adds those
of the rows it writes; retention subtracts those of the jobs it deletes. So the counts are the
same as counting the Step rows afresh (``differences`` checks it), whichever path wrote them.

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


@dataclass(slots=True)
class Contributions:
    """Signed step counts by (group, job, hour key), the seen times of the added steps by
    group, and the jobs whose stored contributions are all taken out (a full replay, a
    deletion)."""

    cells: Counter = field(default_factory=Counter)
    seen: dict[int, list[datetime]] = field(default_factory=dict)
    replaced: set[int] = field(default_factory=set)
    # The latest seen time of the added failures by (group, job).
    latest: dict[tuple[int, int], datetime] = field(default_factory=dict)

    def add(self, group_id: int, job_pk: int, at: datetime | None, sign: int) -> None:
        self.cells[(group_id, job_pk, hour_key(at))] += sign
        if at is not None and sign > 0:
            self.seen.setdefault(group_id, []).append(at)
            pair = (group_id, job_pk)
            if pair not in self.latest or at > self.latest[pair]:
                self.latest[pair] = at


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


def subtract_stored(
    steps: Iterable[tuple[int, int, datetime | None, datetime | None]], into: Contributions
) -> None:
    """Subtract stored grouped steps' contributions: rows of (job pk, group id, started_at,
    finished_at)."""
    for job_pk, group_id, started_at, finished_at in steps:
        into.add(group_id, job_pk, seen_at(started_at, finished_at), -1)


def apply(
    contributions: Contributions,
    attributes: dict[int, tuple[str, str]],
    relabeled: Iterable[int] = (),
) -> dict[tuple[int, int], Seen]:
    """Write the contributions: (group, job) rows, hour rows and group totals; returns, by
    (group, job), the failures the contributions added to it net of those they took out, where
    that is more than none. ``attributes``
    are the touched jobs' (provider, model) (every job of a cell, of ``replaced`` and of
    ``relabeled``); their (group, job) rows follow them. A replaced job's stored rows are
    subtracted whole first. ``relabeled`` jobs changed provider or model: all their rows are
    read. Of the other jobs only the rows of the changed cells are: a long job has a row per
    group it failed in, and a batch must not read them all (docs/architecture.md)."""
    cells = Counter(contributions.cells)
    whole = contributions.replaced.union(relabeled)
    current = _stored(FailureGroupJob.objects.filter(job_id__in=sorted(whole))) if whole else {}
    for (group_id, job_pk), previous in current.items():
        if job_pk in contributions.replaced:
            for key, count in previous.hours.items():
                cells[(group_id, job_pk, key)] -= count
    by_pair: dict[tuple[int, int], Counter] = {}
    for (group_id, job_pk, key), delta in cells.items():
        if delta:
            by_pair.setdefault((group_id, job_pk), Counter())[key] += delta
    pairs = sorted(pair for pair in by_pair if pair[1] not in whole)
    if pairs:
        in_pairs = database.pairs_in(FailureGroupJob, ("group", "job"), pairs)
        current.update(_stored(FailureGroupJob.objects.filter(in_pairs)))
    job_deltas: Counter = Counter()
    step_deltas: Counter = Counter()
    hour_deltas: Counter = Counter()
    created: list[FailureGroupJob] = []
    gone, changed = [], []
    for pair in sorted(by_pair.keys() | current.keys()):
        group_id, job_pk = pair
        deltas = by_pair.get(pair, Counter())
        row = current.get(pair)
        counted = Counter(row.hours if row else {})
        counted.update(deltas)
        hours = {key: count for key, count in sorted(counted.items()) if count > 0}
        step_deltas[group_id] += sum(deltas.values())
        provider, model = attributes.get(job_pk, ("", ""))
        # The hour rows lose what the pair held under its old provider/model and gain what it
        # holds now (the same keys cancel out).
        if row is not None:
            for key, count in row.hours.items():
                if key:
                    hour_deltas[(group_id, hour_of_key(key), row.provider, row.model)] -= count
        for key, count in hours.items():
            if key:
                hour_deltas[(group_id, hour_of_key(key), provider, model)] += count
        values = dict(step_count=sum(hours.values()), hours=hours, provider=provider, model=model)
        if row is None:
            if hours:
                created.append(FailureGroupJob(group_id=group_id, job_id=job_pk, **values))
                job_deltas[group_id] += 1
        elif not hours:
            gone.append(row.pk)
            job_deltas[group_id] -= 1
        elif any(getattr(row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(row, name, value)
            changed.append(row)
    FailureGroupJob.objects.bulk_create(created)
    FailureGroupJob.objects.filter(pk__in=gone).delete()
    FailureGroupJob.objects.bulk_update(changed, ["step_count", "hours", "provider", "model"])
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
    return {
        pair: Seen(sum(deltas.values()), contributions.latest.get(pair))
        for pair, deltas in sorted(by_pair.items())
        if sum(deltas.values()) > 0
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
        attributes: dict[int, tuple[str, str]] = {}
        for row in FailureGroupJob.objects.filter(group=source).order_by("job_id"):
            attributes[row.job_id] = (row.provider, row.model)
            for key, count in row.hours.items():
                contributions.cells[(source.pk, row.job_id, key)] -= count
                contributions.cells[(target.pk, row.job_id, key)] += count
        seen = [moment for moment in (source.first_seen, source.last_seen) if moment]
        if seen:
            contributions.seen[target.pk] = seen
        apply(contributions, attributes)
        Step.objects.filter(failure_group=source).update(failure_group=target)
        Failure.objects.filter(group=source).update(group=target)
        FailureFingerprint.objects.filter(group=source).update(group=target)
        group_lifecycle.mark_merged(source, target, actor=actor)


def _stored(rows) -> dict[tuple[int, int], FailureGroupJob]:
    return {(row.group_id, row.job_id): row for row in rows}


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
    contributions = Contributions(replaced=set(job_pks))
    apply(contributions, {pk: ("", "") for pk in job_pks})


def recount() -> None:
    """Recompute every group's totals and hour rows from the (group, job) rows, which a full
    replay of each job rewrites exactly (``rebuild_projections`` calls this last, so a rebuild
    also repairs tampered totals). Locks every group first: concurrent batches wait."""
    with transaction.atomic():
        list(FailureGroup.objects.select_for_update().order_by("pk").values_list("pk"))
        totals: dict[int, list[int]] = {}
        by_hour: Counter = Counter()
        for group_id, hours, provider, model in FailureGroupJob.objects.values_list(
            "group_id", "hours", "provider", "model"
        ):
            total = totals.setdefault(group_id, [0, 0])
            total[0] += 1
            total[1] += sum(hours.values())
            for key, count in hours.items():
                if key:
                    by_hour[(group_id, hour_of_key(key), provider, model)] += count
        groups = list(FailureGroup.objects.only("pk", "job_count", "step_count"))
        for group in groups:
            group.job_count, group.step_count = totals.get(group.pk, (0, 0))
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
    """Every stored count that differs from counting the Step rows afresh: (group, job) rows
    with their hours and their job's provider/model, hour rows, day rows, group totals. Empty
    when they agree."""
    cells: Counter = Counter()
    rows = Step.objects.filter(failure_group__isnull=False).values_list(
        "job_id", "failure_group_id", "started_at", "finished_at"
    )
    for job_pk, group_id, started_at, finished_at in rows:
        cells[(group_id, job_pk, hour_key(seen_at(started_at, finished_at)))] += 1
    # Job and planner failures have no Step row: their Failure row is what they count by.
    others = Failure.objects.exclude(kind=Failure.Kind.STEP).filter(group__isnull=False)
    for job_pk, group_id, at in others.values_list("job_id", "group_id", "at"):
        cells[(group_id, job_pk, hour_key(at))] += 1
    jobs = {
        pk: (provider, model)
        for pk, provider, model in Job.objects.values_list("pk", "provider", "model")
    }
    expected: dict[tuple[int, int], dict] = {}
    by_hour: Counter = Counter()
    for (group_id, job_pk, key), count in sorted(cells.items()):
        expected.setdefault((group_id, job_pk), {})[key] = count
        if key:
            by_hour[(group_id, hour_of_key(key), *jobs[job_pk])] += count
    stored = {
        (row.group_id, row.job_id): (row.step_count, row.hours, (row.provider, row.model))
        for row in FailureGroupJob.objects.all()
    }
    found = []
    for pair in sorted(stored.keys() | expected.keys()):
        hours = expected.get(pair)
        want = (sum(hours.values()), hours, jobs[pair[1]]) if hours else None
        if stored.get(pair) != want:
            found.append(f"group job {pair}: {stored.get(pair)} != {want}")
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
    totals: dict[int, list[int]] = {}
    for (group_id, _), hours in expected.items():
        total = totals.setdefault(group_id, [0, 0])
        total[0] += 1
        total[1] += sum(hours.values())
    for group_id, job_count, step_count in FailureGroup.objects.values_list(
        "id", "job_count", "step_count"
    ):
        if [job_count, step_count] != totals.get(group_id, [0, 0]):
            found.append(f"group {group_id}: {[job_count, step_count]} != {totals.get(group_id)}")
    return found
