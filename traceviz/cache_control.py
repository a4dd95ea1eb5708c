"""``Cache-Control: private, no-store`` on everything traceviz answers but its static files.

Pages behind the login, exports and the read API carry producer data, escalations and who did
what: no browser cache (a shared machine's back button, a disk) and no proxy may keep them. The
rest (the login page with its CSRF token, /healthz, /metrics, errors) gains nothing from being
cached either, so one rule covers every view, and a new one cannot forget it. Static files never
get here: whitenoise answers them before this middleware, with their own long caching.
"""

from django.utils.cache import patch_cache_control


class PrivateNoStoreMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        patch_cache_control(response, private=True, no_store=True)
        return response
