"""Periodic work that one bad row cannot stop: each job, rule or hour in a transaction of its
own."""

import enum
import functools
import logging
from collections.abc import Callable
from typing import Final, TypeVar

from django.db import connection, transaction

T = TypeVar("T")


R = TypeVar("R")


D = TypeVar("D")


def contained(logger: logging.Logger, what: str, work: Callable[[], T], default: D) -> T | D:
    """``work()`` in a transaction of its own, or ``default`` when it raises.

    The periodic tasks (stall check, alert evaluation, dashboard rollup, retention) go through
    many jobs, rules or hours each run: one they cannot handle (a row no check foresaw) is
    logged with its traceback, naming ``what``, and skipped, so it never stops the others, run
    after run. A lost database is nobody's row: that is raised, and the run fails as a whole."""
    try:
        with transaction.atomic():
            return work()
    except Exception:
        # Only a connection that no longer answers means the database is gone (SQLite reports
        # an integer overflow as an OperationalError too).
        if not connection.is_usable():
            raise
        logger.exception("%s failed and was skipped; the others went on", what)
        return default


class _Failed(enum.Enum):
    FAILED = enum.auto()


FAILED: Final = _Failed.FAILED


def contained_batch(
    logger: logging.Logger,
    what: Callable[[list[T]], str],
    items: list[T],
    work: Callable[[list[T]], R],
) -> tuple[list[R], list[T]]:
    """``work(items)``, ``contained``; when it fails, ``work([item])`` for each item, each
    contained, so that one item nothing can handle costs only itself. Returns the results of
    the work that went through and the items that failed alone. ``what`` names a list of
    items in the log."""
    done = contained(logger, what(items), lambda: work(items), FAILED)
    if done is not FAILED or len(items) == 1:
        return ([done], []) if done is not FAILED else ([], list(items))
    results: list[R] = []
    failed: list[T] = []
    for item in items:
        alone = contained(logger, what([item]), functools.partial(work, [item]), FAILED)
        if alone is FAILED:
            failed.append(item)
        else:
            results.append(alone)
    return results, failed
