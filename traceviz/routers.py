"""An optional read replica (``DATABASE_REPLICA_URL``): pages and the read API read from it,
ingest and every action never do (docs/architecture.md: pages read rows, writers own them).

``ReplicaReadsMiddleware`` marks safe requests (GET, HEAD) as replica reads; ``ReplicaRouter``
sends the app's reads there while that mark is set. Everything else reads the primary:

- requests that change something (ingest, escalation actions, logins), and for a few seconds
  after one of a browser's changes (``TRACEVIZ_REPLICA_PIN_SECONDS``, a cookie), so whoever
  acknowledged an escalation sees it acknowledged although the replica lags;
- reads inside a transaction on the primary (a page's rollup refresh reads what it writes);
- ingest tokens and rate counters (a token issued a second ago must work at once), and the
  auth and session tables.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

REPLICA = "replica"
PIN_COOKIE = "traceviz_read_primary"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PRIMARY_ONLY = frozenset({"ingesttoken", "ratecounter"})

_reads_from: ContextVar[str] = ContextVar("traceviz_reads_from", default="")


@contextmanager
def replica_reads(alias: str) -> Iterator[None]:
    """Route the app's reads to ``alias`` inside the block ("": the primary)."""
    token = _reads_from.set(alias)
    try:
        yield
    finally:
        _reads_from.reset(token)


class ReplicaRouter:
    def db_for_read(self, model, **hints) -> str | None:
        alias = _reads_from.get()
        if (
            alias
            and model._meta.app_label == "jobs"
            and model._meta.model_name not in PRIMARY_ONLY
            and not connections[DEFAULT_DB_ALIAS].in_atomic_block
        ):
            return alias
        return None

    def db_for_write(self, model, **hints) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints) -> bool | None:
        # The replica holds the primary's rows: an object read from one may point at the other's.
        databases = {obj1._state.db, obj2._state.db}
        return True if databases <= {DEFAULT_DB_ALIAS, REPLICA} else None


class ReplicaReadsMiddleware:
    """Safe requests read from the replica (when ``TRACEVIZ_READ_REPLICA`` names one), unless
    this browser changed something in the last ``TRACEVIZ_REPLICA_PIN_SECONDS``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        alias = settings.TRACEVIZ_READ_REPLICA
        if not alias:
            return self.get_response(request)
        if request.method in SAFE_METHODS and PIN_COOKIE not in request.COOKIES:
            with replica_reads(alias):
                response = self.get_response(request)
            if response.streaming:  # an export streams after the view returned
                response.streaming_content = _reading(alias, response.streaming_content)
            return response
        response = self.get_response(request)
        if (
            request.method not in SAFE_METHODS
            and response.status_code < 400
            and settings.SESSION_COOKIE_NAME in request.COOKIES
        ):
            response.set_cookie(
                PIN_COOKIE,
                "1",
                max_age=settings.TRACEVIZ_REPLICA_PIN_SECONDS,
                secure=request.is_secure(),
                httponly=True,
                samesite="Lax",
            )
        return response


def _reading(alias: str, content: Iterator) -> Iterator:
    with replica_reads(alias):
        yield from content
