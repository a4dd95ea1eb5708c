"""Server time of the failure groups pages over ~1M steps (docs/architecture.md).

Runs Django in-process (test Client: no network or browser time) against the database
DATABASE_URL names. The first run creates its data there with bulk inserts (it is a bench, not
ingest): 100,000 jobs of 10 steps over the last 7 days, 30 % of them failing one node one to
three times in one of 60 signatures, with the failure group rows ingest would keep for them
(checked once against a recount from the Step rows). Prints median and p95 over N requests.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_h14a \\
        .venv/bin/python bench/failure_groups.py

Target: p95 < 100 ms for /failures/ (any range) and a group's page.
"""

import argparse
import os
import random
import re
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from jobs.ingest import database, failure_groups  # noqa: E402
from jobs.models import (  # noqa: E402
    Failure,
    FailureFingerprint,
    FailureGroup,
    FailureGroupJob,
    Job,
    Step,
    search_text,
)
from jobs.replay.signatures import Signature  # noqa: E402

PREFIX = "bench-fg-"
STEPS_PER_JOB = 10
WORKFLOWS = ["etl", "publish-release", "crm-sync", "mail-digest", "pdca"]
PROVIDERS = [("openai", "gpt-4o"), ("anthropic", "claude-3"), ("mistral", "large"), ("", "")]
CODES = ["adapter_timeout", "provider_terminal", "tool_invalid_args", "validation_error"]
REASONS = [
    "upstream timeout after {n}s calling {host}",
    "404 bucket releases-{n} not found",
    "schema mismatch on field 'total_{n}'",
    "rate limited by provider, retry after {n} ms",
]


def signatures() -> list[Signature]:
    found = []
    for index in range(60):
        found.append(
            Signature(
                WORKFLOWS[index % len(WORKFLOWS)],
                f"node-{index % 10}",
                CODES[index % len(CODES)],
                "PermanentError" if index % 3 else "TransientError",
                REASONS[index % len(REASONS)].format(n="<n>", host="<url>") + f" #{index // 4}",
            )
        )
    return found


def create_data(job_count: int, rng: random.Random) -> None:
    if Job.objects.filter(job_id__startswith=PREFIX).exists():
        print("data: already there")
        return
    started = time.perf_counter()
    now = timezone.now()
    groups = signatures()
    first = now - timedelta(days=7)
    FailureGroup.objects.bulk_create(
        [
            FailureGroup(
                fingerprint=s.fingerprint,
                workflow=s.workflow,
                node_id=s.node_id,
                failure_code=s.failure_code,
                error_type=s.error_type,
                reason=s.reason,
                example_step=f"{s.node_id}:1",
                first_seen=first,
                last_seen=now,
                created_at=first,
            )
            for s in groups
        ]
    )
    group_ids = dict(FailureGroup.objects.values_list("fingerprint", "id"))
    FailureFingerprint.objects.bulk_create(
        [FailureFingerprint(version=1, fingerprint=fp, group_id=pk) for fp, pk in group_ids.items()]
    )
    # Popular signatures fail often, the tail rarely (as real failures do).
    weights = [1 / (rank + 1) for rank in range(len(groups))]
    contributions = failure_groups.Contributions()
    batch = 5000
    for start in range(0, job_count, batch):
        jobs, steps, failing, failures = [], [], {}, []
        for n in range(start, min(start + batch, job_count)):
            begun = first + timedelta(seconds=n * (7 * 86400 / job_count))
            provider, model = PROVIDERS[n % len(PROVIDERS)]
            fails = rng.random() < 0.3
            signature = rng.choices(groups, weights)[0] if fails else None
            job_id = f"{PREFIX}{n:07d}"
            jobs.append(
                dict(
                    job_id=job_id,
                    status="failed" if fails else "completed",
                    workflow=signature.workflow if fails else WORKFLOWS[n % len(WORKFLOWS)],
                    provider=provider,
                    model=model,
                    started_at=begun,
                    last_event_at=begun + timedelta(seconds=60),
                    finished_at=begun + timedelta(seconds=60),
                    last_received_at=now,
                    step_count=STEPS_PER_JOB,
                    partition_day=begun.date(),
                )
            )
            failing[job_id] = (signature, rng.randint(1, 3), begun, provider, model)
        database.ensure_partitions({job["partition_day"] for job in jobs})
        with transaction.atomic():
            database.insert_rows(Job, jobs)
            pks = dict(Job.objects.filter(job_id__in=list(failing)).values_list("job_id", "id"))
            for job in jobs:
                signature, attempts, begun, provider, model = failing[job["job_id"]]
                job_pk = pks[job["job_id"]]
                position = 0
                for node in range(STEPS_PER_JOB):
                    node_id = f"node-{node}"
                    tries = attempts if signature and node_id == signature.node_id else 0
                    for attempt in range(1, tries + 1):
                        at = begun + timedelta(seconds=position * 5)
                        group_id = group_ids[signature.fingerprint]
                        steps.append(
                            _step(job, job_pk, node_id, attempt, position, at, signature, group_id)
                        )
                        # Seen at its finish, as ingest counts it.
                        contributions.add(
                            group_id, job_pk, at + timedelta(seconds=4), +1, (provider, model)
                        )
                        # Its failure record, as projection writes it (the list's search,
                        # provider filter and recovered counts read these).
                        failures.append(
                            Failure(
                                job_id=job_pk,
                                kind="step",
                                node_id=node_id,
                                attempt=attempt,
                                reason=signature.reason,
                                search_text=search_text(signature.reason),
                                failure_code=signature.failure_code,
                                error_type=signature.error_type,
                                provider=provider,
                                model=model,
                                group_id=group_id,
                                at=at + timedelta(seconds=4),
                            )
                        )
                        position += 1
                    if not tries:
                        at = begun + timedelta(seconds=position * 5)
                        steps.append(_step(job, job_pk, node_id, 1, position, at))
                        position += 1
            database.insert_rows(Step, steps)
            Failure.objects.bulk_create(failures, batch_size=2000)
    with transaction.atomic():
        failure_groups.apply(contributions)
    print(
        f"data: {Job.objects.filter(job_id__startswith=PREFIX).count()} jobs, "
        f"{Step.objects.count()} steps, {FailureGroupJob.objects.count()} group jobs "
        f"in {time.perf_counter() - started:.0f}s"
    )
    started = time.perf_counter()
    problems = failure_groups.differences()
    print(f"recount check: {len(problems)} differences in {time.perf_counter() - started:.1f}s")


def _step(job, job_pk, node_id, attempt, position, at, signature=None, group_id=None) -> dict:
    failed = signature is not None
    return dict(
        job_id=job_pk,
        node_id=node_id,
        attempt=attempt,
        position=position,
        result_type="permanent_failure" if failed else "success",
        segment="failed" if failed else "ok",
        reason=signature.reason.replace("<n>", str(position)) if failed else "",
        failure_code=signature.failure_code if failed else "",
        error_type=signature.error_type if failed else "",
        started_at=at,
        finished_at=at + timedelta(seconds=4),
        duration_ms=4000.0,
        partition_day=job["partition_day"],
        failure_group_id=group_id,
    )


def measure(client: Client, url: str, requests: int) -> tuple[float, float]:
    for _ in range(3):
        assert client.get(url).status_code == 200, url
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return statistics.median(times), statistics.quantiles(times, n=20)[-1]


def page_two(client: Client) -> str:
    """The cursor parameter of the 7-day list's second page (sorted by most steps): the data's
    60 groups make two pages of 50."""
    html = client.get("/failures/?range=7d&sort=steps").content.decode()
    found = re.search(r"[?&;](cursor=[\w-]+)", html)
    return found.group(1) if found else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    print(f"database: {connection.vendor} {settings.DATABASES['default']['NAME']}")
    call_command("migrate", verbosity=0)
    # Pages name their static files by the manifest, as in production.
    call_command("collectstatic", interactive=False, verbosity=0)
    create_data(args.jobs, random.Random(14))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    user, _ = User.objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    client = Client()
    client.force_login(user)
    top = FailureGroup.objects.order_by("-step_count").first()
    pages = [
        ("failures: 24 h (default)", "/failures/"),
        ("failures: 1 h", "/failures/?range=1h"),
        ("failures: 7 d", "/failures/?range=7d"),
        ("failures: 7 d, provider=OpenAI", "/failures/?range=7d&provider=OpenAI"),
        ("failures: 7 d, search 'timeout'", "/failures/?range=7d&q=timeout"),
        ("failures: 7 d, newest first", "/failures/?range=7d&sort=newest"),
        ("failures: 7 d, last seen first", "/failures/?range=7d&sort=last_seen"),
        ("failures: 7 d, status=all, most jobs", "/failures/?range=7d&status=all&sort=jobs"),
        ("failures: 7 d, ended their job", "/failures/?range=7d&ended=on"),
        ("failures: 7 d, page 2", "/failures/?range=7d&sort=steps&" + page_two(client)),
        ("group page: biggest, 7 d", f"/failures/{top.fingerprint}/?range=7d"),
        ("jobs list: group filter", f"/?show=all&group={top.fingerprint}"),
    ]
    print(f"{'page':<36} {'median':>9} {'p95':>9}   ({args.requests} requests each)")
    for label, url in pages:
        median, p95 = measure(client, url, args.requests)
        print(f"{label:<36} {median:>7.1f}ms {p95:>7.1f}ms")
    print(f"biggest group: {top.job_count} jobs, {top.step_count} steps")


if __name__ == "__main__":
    main()
