"""View decorators for the JSON API: bearer tokens, sessions, database outages, ingest metrics."""

import json
import logging
import time
from functools import wraps

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import JsonResponse

from jobs.ingest import counters
from jobs.models import IngestToken
from jobs.web import ratelimit
from jobs.web.access import can_view
from jobs.web.schemas import Error, json_response

logger = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = "5"


def json_error(status: int, message: str) -> JsonResponse:
    return json_response(Error(error=message), status)


def bearer_token(request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def database_unavailable_is_503(view):
    """A database that cannot be reached answers 503 with Retry-After, never 500: ingest is
    idempotent, so the producer's retry is safe."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except (OperationalError, InterfaceError):
            response = json_error(503, "database unavailable, retry later")
            response["Retry-After"] = RETRY_AFTER_SECONDS
            return response

    return wrapper


def ingest_token_required(view):
    """Requires ``Authorization: Bearer <ingest token>``; the token is passed on as
    ``request.ingest_token``."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        raw = bearer_token(request)
        if raw is None:
            return _unauthorized("missing bearer token: send Authorization: Bearer <token>")
        token = IngestToken.authenticate(raw)
        if token is None:
            return _unauthorized("invalid or revoked token")
        request.ingest_token = token
        return view(request, *args, **kwargs)

    return wrapper


def token_or_login_required(view):
    """For the read API: a valid bearer token, or a logged-in user who holds a role (as the
    pages ask; a signed-in user without one gets 403)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.user.is_authenticated and bearer_token(request) is None:
            if not can_view(request.user):
                return json_error(403, "your account has no role: ask staff for one")
            return view(request, *args, **kwargs)
        return ingest_token_required(view)(request, *args, **kwargs)

    return wrapper


def _unauthorized(message: str) -> JsonResponse:
    response = json_error(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="traceviz"'
    return response


def token_rate_limited(view):
    """Per-token request limit (TRACEVIZ_INGEST_RATE_LIMIT per minute, or the token's own):
    past it, 429 with Retry-After. Goes inside ``ingest_token_required``."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        token = request.ingest_token
        limit = token.rate_limit_per_minute or settings.TRACEVIZ_INGEST_RATE_LIMIT
        retry_after = ratelimit.hit(f"token:{token.pk}", limit, 60)
        if retry_after is not None:
            response = json_error(429, f"rate limit of {limit} requests per minute exceeded")
            response["Retry-After"] = str(retry_after)
            return response
        return view(request, *args, **kwargs)

    return wrapper


def measure_ingest(endpoint: str):
    """Ingest view decorator: observes request latency and counts the request by status, the
    refused items and requests, and what the view left in ``request.ingest_counts`` (spans),
    after the view's own transaction, in one upsert. A view whose error body is not the event
    API's JSON says why in ``request.ingest_rejection``."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            started = time.perf_counter()
            response = view(request, *args, **kwargs)
            status = response.status_code
            deltas = counters.latency_deltas(time.perf_counter() - started)
            deltas.update(counters.request_deltas(endpoint, status))
            deltas.update(getattr(request, "ingest_counts", {}))
            if status == 207 or status >= 400:
                body = _json_object(response)
                if why := getattr(request, "ingest_rejection", None):
                    body = {"error": why}
                deltas.update(counters.rejection_deltas(status, body))
            try:
                counters.increment(deltas)
            except DatabaseError:
                # Metrics must never turn an ingest answer (already decided) into a 500.
                logger.warning("ingest metrics not recorded", exc_info=True)
            return response

        return wrapper

    return decorator


def _json_object(response) -> dict:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
