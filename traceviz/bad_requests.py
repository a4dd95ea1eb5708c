"""Text no traceviz URL or cookie has a use for never reaches a view or the database.

PostgreSQL text cannot hold a NUL: any lookup given one fails (a 500), wherever it comes from.

- ``NulInCookiesMiddleware`` (before the session middleware) drops a cookie whose name or value
  holds a NUL, so ``sessionid="abcdefgh\\000ijkl"`` is no session (the login page, or a bearer
  token, still works) rather than a failed session lookup on every page and API.
- ``NulInRequestMiddleware`` answers 400 to a NUL in the path or the query string, on every URL:
  no job id, fingerprint or filter holds one, and some readers of the query string (the admin's
  search and filters) pass values straight into queries.
"""

from django.http import HttpResponseBadRequest

NUL = "\x00"


class NulInCookiesMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        cookies = request.COOKIES
        for name in [name for name, value in cookies.items() if NUL in name or NUL in value]:
            del cookies[name]
        return self.get_response(request)


class NulInRequestMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if NUL in request.path:
            return _bad_request("NUL characters are not allowed in the path.")
        if any(
            NUL in key or any(NUL in value for value in values)
            for key, values in request.GET.lists()
        ):
            return _bad_request("NUL characters are not allowed in the query string.")
        return self.get_response(request)


def _bad_request(message: str) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
