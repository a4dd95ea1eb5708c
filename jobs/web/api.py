"""The JSON API: ingest for producers, read endpoints for tools, health for monitoring."""

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from jobs.contract import bodies
from jobs.ingest import projector, store
from jobs.models import Job, JobAlias, matched_failures, next_attempts
from jobs.web import schemas
from jobs.web.access import moved_url
from jobs.web.decorators import (
    RETRY_AFTER_SECONDS,
    database_unavailable_is_503,
    ingest_token_required,
    json_error,
    measure_ingest,
    token_or_login_required,
    token_rate_limited,
)
from jobs.web.filters import JobFilterForm, after_cursor, encode_cursor
from jobs.web.openapi import openapi_document
from jobs.web.schemas import json_response

RESPOND_ASYNC = "respond-async"


def prefers_async(request) -> bool:
    """Whether the request's ``Prefer`` header (RFC 7240) asks for ``respond-async``: the
    answer right after the append, before its jobs are projected."""
    preferences = request.headers.get("Prefer", "")
    for preference in preferences.split(","):
        name = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
        if name == RESPOND_ASYNC:
            return True
    return False


def applied_async(response, status: int | None = None):
    """``response`` answered as ``Prefer: respond-async`` asked: 202 Accepted in place of a
    200 (``status``, when given, says which it was; a 207 or 400 keeps its per-item errors),
    and ``Preference-Applied`` saying so."""
    if response.status_code == 200 and status in (None, 200):
        response.status_code = 202
        response.reason_phrase = "Accepted"
    response["Preference-Applied"] = RESPOND_ASYNC
    return response


def read_body(request, limit: int) -> bytes:
    """The request body, refused (413) past ``limit`` bytes: from Content-Length before reading
    anything, and while reading for bodies that do not declare a length.

    A chunked body (no Content-Length) is read when the server decodes chunked input and says
    so (``wsgi.input_terminated``, as gunicorn does); a server that does not would hand over
    nothing, so such a body is refused (411) with a message saying why. A body that stops
    arriving (gunicorn's body timeout, deploy/gunicorn.conf.py) is a 408.
    """
    try:
        return _read_body(request, limit)
    except OSError as error:  # Django's UnreadablePostError is one
        raise bodies.BodyError(
            408, f"the request body stopped arriving before its end ({error}): send it again"
        ) from None


def _read_body(request, limit: int) -> bytes:
    raw_length = request.META.get("CONTENT_LENGTH") or ""
    if not raw_length and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        if not request.META.get("wsgi.input_terminated"):
            raise bodies.BodyError(
                411,
                "chunked request bodies are not supported by this server: send Content-Length",
            )
        body = request.META["wsgi.input"].read(limit + 1)
        if len(body) > limit:
            raise bodies.BodyError(413, f"body is over the limit of {limit} bytes")
        return body
    try:
        declared = int(raw_length or 0)
    except ValueError:
        raise bodies.BodyError(400, "Content-Length must be an integer") from None
    if declared > limit:
        raise bodies.BodyError(413, f"body of {declared} bytes is over the limit of {limit} bytes")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise bodies.BodyError(413, f"body is over the limit of {limit} bytes")
    return body


@csrf_exempt
@require_POST
@measure_ingest("events")
@store.collector_paused()  # parsing too makes thousands of objects
@database_unavailable_is_503
@ingest_token_required
@token_rate_limited
def ingest_events(request):
    """POST /api/v1/events: one JSON object, a JSON array, or NDJSON lines. With
    ``Prefer: respond-async``, 202 once the events are durable (docs/api.md)."""
    limit = settings.TRACEVIZ_MAX_BODY_BYTES
    try:
        body = bodies.decompress(
            read_body(request, limit), request.headers.get("Content-Encoding"), limit
        )
        batch = bodies.parse_body(body, request.content_type, settings.TRACEVIZ_MAX_BATCH_EVENTS)
    except bodies.BodyError as error:
        return json_error(error.status, error.message)
    respond_async = prefers_async(request)
    result = store.store_batch(batch, token=request.ingest_token, project=not respond_async)
    answer = schemas.IngestResult.model_validate(result, from_attributes=True)
    response = json_response(answer, result.http_status)
    return applied_async(response) if respond_async else response


# The jobs page's filters (not its live refresh anchor), and the API's own page parameters.
API_JOB_PARAMETERS = (set(JobFilterForm.base_fields) - {"anchor"}) | {"limit"}
API_PARAMETERS_HINT = "the parameters are " + ", ".join(sorted(API_JOB_PARAMETERS))


@csrf_exempt  # bearer-token API: GET only; other methods get 405, not a CSRF 403
@require_GET
@database_unavailable_is_503
@token_or_login_required
def jobs_list(request):
    """GET /api/v1/jobs?status=failed,paused:transient&meta=git_sha:abc123&limit=50&cursor=...:
    newest first."""
    unknown = sorted(set(request.GET) - API_JOB_PARAMETERS)
    if unknown:
        return json_error(400, f"unknown parameter {', '.join(unknown)}: {API_PARAMETERS_HINT}")
    query = request.GET.copy()
    # The API lists every job unless asked otherwise; the page starts from those that need
    # attention. Every filter means the same on both (JobQuerySet.matching).
    query.setdefault("show", "all")
    form = JobFilterForm(query)
    if not form.is_valid():
        problems = "; ".join(
            error if error.startswith(name) else f"{name}: {error}"
            for name, errors in sorted(form.errors.items())
            for error in map(str, errors)
        )
        return json_error(400, problems)
    jobs = (
        Job.objects.matching(form.cleaned_data)
        .defer("fold", "metadata")
        .with_matched_failure(form.cleaned_data.get("reason") or "")
    )
    try:
        limit = int(request.GET.get("limit", schemas.DEFAULT_PAGE_SIZE))
    except ValueError:
        return json_error(400, "limit must be an integer")
    max_limit = settings.TRACEVIZ_API_MAX_PAGE_SIZE
    if not 1 <= limit <= max_limit:
        return json_error(400, f"limit must be from 1 to {max_limit}")
    listed = after_cursor(jobs, form.cleaned_data.get("cursor"))
    page = list(listed[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    due, matched = next_attempts(page), matched_failures(page)
    return json_response(
        schemas.JobPage(
            jobs=[
                schemas.ListedJob.listed(job, due.get(job.pk), matched.get(job.pk)) for job in page
            ],
            next_cursor=encode_cursor(page[-1]) if more else None,
        )
    )


@csrf_exempt  # bearer-token API: GET only; other methods get 405, not a CSRF 403
@require_GET
@database_unavailable_is_503
@token_or_login_required
def job_detail(request, job_id: str):
    """GET /api/v1/jobs/<job_id>: replayed state, steps in event order with their calls, the
    job's metadata and totals, escalations. An alias of a job (a trace id whose trace named its
    job) answers 307 to that job's URL."""
    try:
        job = get_object_or_404(Job.objects.defer("fold"), job_id=job_id)
    except Http404:
        if (named := JobAlias.objects.job_of(job_id)) is not None:
            return HttpResponseRedirect(moved_url(request, "jobs:api-job", named), status=307)
        if (waiting := projector.backlog(job_id)) is not None:
            return json_error(
                404, f"no job {job_id!r} yet: its {waiting.events} events are not projected yet"
            )
        return json_error(404, f"no job {job_id!r}")
    waiting = projector.backlog(job.job_id)
    return json_response(
        schemas.Job.from_job(job, unprojected_events=waiting.events if waiting else 0)
    )


@csrf_exempt
@require_GET
def openapi(request):
    return JsonResponse(openapi_document())


@csrf_exempt
@never_cache
@require_GET
def healthz(request):
    """Liveness plus a database round trip, and how far projection is behind (dirty jobs and
    the oldest mark's age); 503 when the database cannot be reached."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        dirty_jobs, lag = projector.dirty_summary(timezone.now())
    except Exception:
        response = json_response(schemas.Health(status="unavailable", database="unreachable"), 503)
        response["Retry-After"] = RETRY_AFTER_SECONDS
        return response
    projection = schemas.Projection(dirty_jobs=dirty_jobs, lag_seconds=round(lag, 3))
    return json_response(schemas.Health(status="ok", database="ok", projection=projection))
