"""Per-job locks, in two spaces (docs/architecture.md, "Data flow"):

- the *append* lock: one job's appends take turns under it (each reads which of its events are
  stored, then COPYs the others in, and numbers them after the job's mark);
- the *projection* lock: whoever writes a job's rows from its events holds it (the projector,
  a request projecting its own jobs, rebuild), so two never fold one job at once.

An append never waits for a fold, nor a fold for an append. Writers of a job's whole history
(re-homing, rebuild, purge, retention) take both, append first: every append key sorts before
every projection key, so writers taking them in sorted order never deadlock.
"""

import zlib
from collections.abc import Iterable

from jobs.ingest import database

# The projection keys sit above every append key (a CRC-32 is below 2**32).
PROJECTION_SPACE = 1 << 32


def _keys(job_ids: Iterable[str]) -> dict[int, list[str]]:
    keys: dict[int, list[str]] = {}
    for job_id in sorted(set(job_ids)):
        keys.setdefault(zlib.crc32(job_id.encode("utf-8")), []).append(job_id)
    return keys


def lock_appends(job_ids: Iterable[str]) -> None:
    """Take these jobs' append locks (in sorted order). Must run inside a transaction;
    released when it ends. On SQLite, whose writers are serialised by the database itself,
    this and the others do nothing."""
    database.lock_keys(sorted(_keys(job_ids)))


def lock_projections(job_ids: Iterable[str]) -> None:
    """Take these jobs' projection locks, waiting for whoever holds them."""
    database.lock_keys(sorted(key + PROJECTION_SPACE for key in _keys(job_ids)))


def try_lock_projections(job_ids: Iterable[str]) -> set[str]:
    """Take those of these jobs' projection locks that nobody holds; returns their jobs."""
    keys = _keys(job_ids)
    taken = database.try_lock_keys(sorted(key + PROJECTION_SPACE for key in keys))
    return {job_id for key in taken for job_id in keys[key - PROJECTION_SPACE]}


def lock_jobs(job_ids: Iterable[str]) -> None:
    """Take both locks of these jobs (a writer of their whole history): no append stores
    events of them, and no fold writes their rows, until the caller's transaction ends."""
    keys = sorted(_keys(job_ids))
    database.lock_keys(keys + [key + PROJECTION_SPACE for key in keys])
