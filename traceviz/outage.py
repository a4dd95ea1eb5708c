"""A database outage answers 503 with Retry-After on every page, API and /metrics, never 500.

``DatabaseOutageMiddleware`` catches the outage in views (the common case: the first query of a
request fails); ``server_error`` (handler500) catches it anywhere else, such as a middleware's
session or user lookup. The answer is built without the database: no template context
processors, no user, no session.
"""

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.views import defaults

RETRY_AFTER_SECONDS = "5"
OUTAGE_ERRORS = (OperationalError, InterfaceError)
MESSAGE = "database unavailable, retry later"
PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    "<title>traceviz: database unavailable</title></head><body><main>"
    "<h1>The database is unavailable</h1>"
    "<p>traceviz cannot reach its database right now. Nothing was changed; try again in a few "
    "seconds.</p></main></body></html>"
)


def database_unavailable(request) -> HttpResponse:
    """The 503 answer: JSON for the APIs, text for /metrics, a small page elsewhere."""
    response: HttpResponse
    if request.path.startswith(("/api/", "/v1/")):
        response = JsonResponse({"error": MESSAGE}, status=503)
    elif request.path.startswith("/metrics"):
        response = HttpResponse(MESSAGE + "\n", status=503, content_type="text/plain")
    else:
        response = HttpResponse(PAGE, status=503)
    response["Retry-After"] = RETRY_AFTER_SECONDS
    response["Cache-Control"] = "no-store"
    return response


class DatabaseOutageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OUTAGE_ERRORS):
            return database_unavailable(request)
        return None


def server_error(request):
    """handler500: the outage answer when the uncaught exception is a lost database."""
    if isinstance(sys.exc_info()[1], OUTAGE_ERRORS):
        return database_unavailable(request)
    return defaults.server_error(request)
