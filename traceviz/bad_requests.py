"""A NUL in the query string answers 400 on every URL.

PostgreSQL text cannot hold a NUL, and some readers of the query string (the admin's search
and filters) pass values straight into queries, where it would end as a 500. No traceviz
filter has a use for one.
"""

from django.http import HttpResponseBadRequest


class NulInQueryMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if any("\x00" in key or "\x00" in value for key, value in request.GET.items()):
            return HttpResponseBadRequest(
                "NUL characters are not allowed in the query string.",
                content_type="text/plain; charset=utf-8",
            )
        return self.get_response(request)
