"""The real client address: X-Forwarded-For is believed only from TRACEVIZ_TRUSTED_PROXIES."""

import ipaddress

import pytest
from django.test import RequestFactory

from jobs.web.client_address import client_address


def request(remote_addr: str, forwarded_for: str | None = None):
    headers = {"REMOTE_ADDR": remote_addr}
    if forwarded_for is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded_for
    return RequestFactory().get("/", **headers)


@pytest.fixture
def trusted(settings):
    def trust(*networks):
        settings.TRACEVIZ_TRUSTED_PROXY_NETWORKS = [ipaddress.ip_network(n) for n in networks]

    trust()
    return trust


def test_without_trusted_proxies_the_peer_is_the_client(trusted):
    assert client_address(request("203.0.113.5", "10.1.1.1")) == "203.0.113.5"


def test_from_a_trusted_proxy_the_forwarded_client_is_believed(trusted):
    trusted("127.0.0.1")
    assert client_address(request("127.0.0.1", "203.0.113.5")) == "203.0.113.5"


def test_a_client_cannot_prepend_a_forged_address(trusted):
    # The proxy appends the address it saw; whatever the client sent comes before it.
    trusted("127.0.0.1")
    assert client_address(request("127.0.0.1", "127.0.0.1, 203.0.113.5")) == "203.0.113.5"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right(trusted):
    trusted("127.0.0.1", "10.0.0.0/8")
    forwarded = "198.51.100.9, 203.0.113.5, 10.2.3.4"
    assert client_address(request("127.0.0.1", forwarded)) == "203.0.113.5"


def test_a_header_from_an_untrusted_peer_is_ignored(trusted):
    trusted("10.0.0.0/8")
    assert client_address(request("203.0.113.5", "127.0.0.1")) == "203.0.113.5"


def test_garbage_in_the_header_stops_the_walk_at_the_last_trusted_hop(trusted):
    trusted("127.0.0.1")
    assert client_address(request("127.0.0.1", "not-an-address")) == "127.0.0.1"


def test_when_every_hop_is_trusted_the_leftmost_is_the_client(trusted):
    trusted("127.0.0.1", "10.0.0.0/8")
    assert client_address(request("127.0.0.1", "10.9.9.9, 10.1.1.1")) == "10.9.9.9"


def test_an_ipv6_peer_and_a_missing_header(trusted):
    trusted("::1")
    assert client_address(request("::1")) == "::1"
    assert client_address(request("::1", "2001:db8::7")) == "2001:db8::7"
