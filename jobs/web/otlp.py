"""OTLP/HTTP ingest: ``POST /v1/traces`` and ``POST /v1/logs`` (docs/otlp.md).

Answers as the OTLP/HTTP specification says: success is an ``ExportTraceServiceResponse`` or
``ExportLogsServiceResponse`` (with ``partial_success`` when spans or records were rejected),
failures a ``google.rpc.Status``, each encoded as the request was (binary protobuf or JSON).
Bodies go through the same limits as the event API, spans through ``contract.otlp`` and log
records through ``contract.otlp_logs`` into ordinary events, and those through
``store.store_batch``.
"""

from functools import wraps

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from jobs.contract import bodies, otlp, otlp_logs
from jobs.ingest import counters, store
from jobs.models import IngestToken
from jobs.web import ratelimit
from jobs.web.api import applied_async, prefers_async, read_body
from jobs.web.decorators import RETRY_AFTER_SECONDS, bearer_token, measure_ingest

# The gRPC code carried in the Status body of each HTTP status this endpoint answers.
GRPC_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    405: code_pb2.UNIMPLEMENTED,
    411: code_pb2.INVALID_ARGUMENT,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


def response_encoding(request) -> str:
    """The content type to answer in: the request's, JSON when it sent neither OTLP type."""
    kind = bodies.media_type(request.content_type)
    return otlp.PROTOBUF if kind == otlp.PROTOBUF else otlp.JSON


def otlp_response(message: Message, encoding: str, status: int = 200) -> HttpResponse:
    if encoding == otlp.PROTOBUF:
        body = message.SerializeToString()
    else:
        body = json_format.MessageToJson(message, indent=None).encode("utf-8")
    return HttpResponse(body, status=status, content_type=encoding)


def otlp_error(request, status: int, message: str) -> HttpResponse:
    """A ``google.rpc.Status`` body, as the OTLP/HTTP specification asks of failures."""
    rpc_status = status_pb2.Status(code=GRPC_CODES.get(status, code_pb2.UNKNOWN), message=message)
    request.ingest_rejection = message  # for the ingest metrics (the body may be protobuf)
    response = otlp_response(rpc_status, response_encoding(request), status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="traceviz"'
    if status == 503:
        response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


def otlp_endpoint(view):
    """POST only, the ingest bearer token (``request.ingest_token``), the token's rate limit
    (shared with the event API) as a 429, and a database outage as a retryable 503: the
    decorators of the event API, with OTLP Status bodies."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method != "POST":
            response = otlp_error(request, 405, "use POST")
            response["Allow"] = "POST"
            return response
        raw = bearer_token(request)
        if raw is None:
            return otlp_error(
                request, 401, "missing bearer token: send Authorization: Bearer <token>"
            )
        try:
            token = IngestToken.authenticate(raw)
            if token is None:
                return otlp_error(request, 401, "invalid or revoked token")
            limit = token.rate_limit_per_minute or settings.TRACEVIZ_INGEST_RATE_LIMIT
            retry_after = ratelimit.hit(f"token:{token.pk}", limit, 60)
            if retry_after is not None:
                message = f"rate limit of {limit} requests per minute exceeded"
                response = otlp_error(request, 429, message)
                response["Retry-After"] = str(retry_after)
                return response
            request.ingest_token = token
            return view(request, *args, **kwargs)
        except (OperationalError, InterfaceError):
            return otlp_error(request, 503, "database unavailable, retry later")

    return wrapper


def _read_body(request, kind: str) -> bytes:
    """The request's body, inflated, within the body limit. Raises ``BodyError``."""
    limit = settings.TRACEVIZ_MAX_BODY_BYTES
    if kind not in otlp.CONTENT_TYPES:
        raise otlp.unsupported_content_type(kind)
    return bodies.decompress(
        read_body(request, limit), request.headers.get("Content-Encoding"), limit
    )


@csrf_exempt
@measure_ingest("traces")
@store.collector_paused()  # parsing too makes thousands of objects
@otlp_endpoint
def export_traces(request):
    """POST /v1/traces: an OTLP ExportTraceServiceRequest, protobuf or JSON, maybe gzipped.
    With ``Prefer: respond-async``, 202 once the spans are durable (docs/otlp.md)."""
    kind = bodies.media_type(request.content_type)
    try:
        body = _read_body(request, kind)
        traces = otlp.to_batch(otlp.decode_request(body, kind), settings.TRACEVIZ_MAX_BATCH_EVENTS)
    except bodies.BodyError as error:
        return otlp_error(request, error.status, error.message)
    respond_async = prefers_async(request)
    store.store_batch(traces.batch, token=request.ingest_token, project=not respond_async)
    accepted = traces.span_count - traces.rejected_spans
    request.ingest_counts = counters.span_deltas(accepted, traces.rejections)
    answer = ExportTraceServiceResponse()
    if traces.rejected_spans:
        answer.partial_success.CopyFrom(
            ExportTracePartialSuccess(
                rejected_spans=traces.rejected_spans, error_message=traces.error_message
            )
        )
    response = otlp_response(answer, kind)
    return applied_async(response) if respond_async else response


@csrf_exempt
@measure_ingest("logs")
@store.collector_paused()
@otlp_endpoint
def export_logs(request):
    """POST /v1/logs: an OTLP ExportLogsServiceRequest, protobuf or JSON, maybe gzipped. Each
    record becomes a ``log`` event of its trace's job."""
    kind = bodies.media_type(request.content_type)
    try:
        body = _read_body(request, kind)
        logs = otlp_logs.to_batch(
            otlp_logs.decode_request(body, kind), settings.TRACEVIZ_MAX_BATCH_EVENTS
        )
    except bodies.BodyError as error:
        return otlp_error(request, error.status, error.message)
    store.store_batch(logs.batch, token=request.ingest_token)
    accepted = logs.record_count - logs.rejected_records
    request.ingest_counts = counters.log_record_deltas(accepted, logs.rejections)
    answer = ExportLogsServiceResponse()
    if logs.rejected_records:
        answer.partial_success.CopyFrom(
            ExportLogsPartialSuccess(
                rejected_log_records=logs.rejected_records, error_message=logs.error_message
            )
        )
    return otlp_response(answer, kind)
