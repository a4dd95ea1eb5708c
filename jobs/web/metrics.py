"""GET /metrics: Prometheus text built from database rows, for monitoring only."""

import hmac
import ipaddress
from functools import wraps

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from jobs.dashboard.exposition import exposition
from jobs.web.client_address import client_address
from jobs.web.decorators import bearer_token


def _address_allowed(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in settings.TRACEVIZ_METRICS_ALLOW_NETWORKS)


def metrics_access_required(view):
    """The metrics token (Bearer), an allow-listed client address, or a staff session; else 403.

    The address is the real client's (``client_address``: X-Forwarded-For is believed only
    from TRACEVIZ_TRUSTED_PROXIES), so a proxy on loopback does not let everyone in.
    """

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        expected = settings.TRACEVIZ_METRICS_TOKEN
        sent = bearer_token(request)
        # Bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
        token_ok = bool(
            expected
            and sent
            and hmac.compare_digest(
                sent.encode("utf-8", "surrogateescape"), expected.encode("utf-8")
            )
        )
        staff = request.user.is_authenticated and request.user.is_staff
        if not (token_ok or staff or _address_allowed(client_address(request))):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapper


@never_cache
@require_GET
@metrics_access_required
def prometheus_metrics(request):
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
