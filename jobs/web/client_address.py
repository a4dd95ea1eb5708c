"""The real client address, for sign-in limits (django-axes) and the /metrics allow-list.

Behind a TLS proxy every request comes from the proxy's address, so the client is read from
X-Forwarded-For, but only when the peer is a trusted proxy (TRACEVIZ_TRUSTED_PROXIES): anyone
else could send the header and pick the address they are judged by.
"""

import ipaddress

from django.conf import settings


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(address in network for network in settings.TRACEVIZ_TRUSTED_PROXY_NETWORKS)


def _parse(raw: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(raw.strip())
    except ValueError:
        return None


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, unless that is a trusted proxy; then X-Forwarded-For
    is walked from the right (each proxy appends the address it saw, so only the right end is
    written by someone trusted) and the first untrusted address is the client. An entry that is
    not an address stops the walk at the last trusted hop; when every hop is trusted, the
    leftmost one is the client. "" when REMOTE_ADDR is missing or unreadable."""
    peer = _parse(request.META.get("REMOTE_ADDR", ""))
    if peer is None:
        return ""
    current = peer
    if _trusted(peer):
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        for raw in reversed(forwarded.split(",") if forwarded else []):
            hop = _parse(raw)
            if hop is None:
                break
            current = hop
            if not _trusted(hop):
                break
    return str(current)
