"""Kubernetes' URL, IP, CIDR and format libraries in device selectors.

A network DRA driver publishes addresses and endpoints as string attributes;
selectors then test them with `cidr(...).containsIP(...)`, `url(...)` and
`format....validate(...)` as the scheduler would.
"""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector
from dra_driver.scheduling.cel.cost import COST_LIMIT_MESSAGE
from dra_driver.scheduling.cel.environment import LIBRARIES, enabled, strict_url_colons

NIC = DeviceView(
    driver="net.example.com",
    attributes={
        "ip": {"string": "10.1.2.3"},
        "ipv6": {"string": "fd00::10"},
        "endpoint": {"string": "https://10.1.2.3:8443/metrics?format=prom&format=json"},
        "name": {"string": "eth0"},
    },
    capacity={},
)


def matches(expression: str, device: DeviceView = NIC, release: str | None = None) -> bool:
    return compile_selector(expression, release=release).matches(device)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("cidr('10.0.0.0/8').containsIP(device.attributes['net.example.com'].ip)", True),
        ("cidr('10.0.0.0/16').containsIP(ip(device.attributes['net.example.com'].ip))", False),
        ("ip(device.attributes['net.example.com'].ipv6).family() == 6", True),
        ("ip(device.attributes['net.example.com'].ipv6).isGlobalUnicast()", True),
        ("isIP(device.attributes['net.example.com'].name)", False),
        ("url(device.attributes['net.example.com'].endpoint).getPort() == '8443'", True),
        (
            "url(device.attributes['net.example.com'].endpoint).getQuery()['format']"
            " == ['prom', 'json']",
            True,
        ),
        ("isURL(device.attributes['net.example.com'].name)", False),
        (
            "!format.dns1123Label().validate(device.attributes['net.example.com'].name).hasValue()",
            True,
        ),
        ("format.named('labelValue').value().validate('eth0') == optional.none()", True),
    ],
)
def test_selectors_on_network_attributes(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_parse_errors_name_the_value_like_the_scheduler() -> None:
    with pytest.raises(CelError) as info:
        matches("ip(device.attributes['net.example.com'].endpoint).isLoopback()")
    assert 'IP Address "https://10.1.2.3:8443/metrics?format=prom&format=json" parse error' in str(
        info.value
    )
    with pytest.raises(CelError, match=r'IPv4-mapped IPv6 address "::ffff:10\.1\.2\.3"'):
        matches("ip('::ffff:10.1.2.3').isLoopback()")
    with pytest.raises(CelError, match=r'IP address "fe80::1%eth0" with zone value is not allowed'):
        matches("ip('fe80::1%eth0').isLoopback()")
    with pytest.raises(CelError, match="URL parse error during conversion from string"):
        matches("url('relative/path').getScheme() == ''")


def test_new_types_have_names_and_compare_only_with_themselves() -> None:
    assert matches("type(ip('1.2.3.4')) == net.IP && type(cidr('1.2.3.0/24')) == net.CIDR")
    assert matches("cidr('1.2.3.4/24').masked() == cidr('1.2.3.0/24')")
    assert matches("url('http://x/a') == url('http://x/a')")
    assert matches("format.uri() != format.uuid()")
    with pytest.raises(CelError, match="found no matching overload for '_==_'"):
        compile_selector("ip('1.2.3.4') == cidr('1.2.3.4/32')")
    # Behind dyn the comparison is an error, as the types' Equal is upstream.
    with pytest.raises(CelError, match="no such overload"):
        matches("dyn(ip('1.2.3.4')) == cidr('1.2.3.4/32')")
    with pytest.raises(CelError, match="no such overload"):
        matches("dyn(url('http://x/')) == 'http://x/'")
    assert matches("dyn(ip('1.2.3.4')) != null")


def test_url_colon_rule_follows_the_release() -> None:
    expression = "isURL('http://a:b:80/')"
    assert matches(expression, release="1.34")
    assert matches(expression, release="1.35")
    assert not matches(expression, release="1.36")
    assert not matches(expression, release="1.37")
    assert not matches(expression)  # the newest release by default
    # The compile cache keeps the releases apart, folded literals included.
    assert compile_selector(expression, release="1.35") is not compile_selector(
        expression, release="1.36"
    )
    # format.uri() is the same parser.
    uri = "format.uri().validate('http://a:b:80/') == optional.none()"
    assert matches(uri, release="1.35")
    assert not matches(uri, release="1.36")
    assert strict_url_colons(None)
    assert not strict_url_colons("1.35")


def test_every_supported_release_has_the_libraries() -> None:
    for release in ("1.34", "1.35", "1.36"):
        for library in ("library.URLs", "library.IP", "library.CIDR", "library.Format"):
            assert enabled(library, release)
        assert not enabled("library.Lists(version 1)", release)
    assert not enabled("library.Format", "1.30")
    assert set(LIBRARIES) >= {"library.IP", "library.CIDR", "library.Format", "library.URLs"}


def test_costs_follow_kubernetes_cost_model() -> None:
    selector = compile_selector(
        "cidr('10.0.0.0/8').containsIP(device.attributes['net.example.com'].ip)"
    )
    _, cost = selector.matches_with_cost(NIC)
    # cidr('10.0.0.0/8'): ceil(0.1 * 10) = 1; device.attributes[...].ip: 2 + 1 + 1 = 4;
    # containsIP(string): ceil(0.1 * 2 * 1 prefix byte) + ceil(0.1 * 8) = 1 + 1.
    assert cost == 1 + 4 + 2


def test_the_cost_limit_stops_expensive_validation() -> None:
    items = ", ".join(str(i) for i in range(100))
    long_name = "a" * 250
    expression = (
        f"[{items}].all(i, [{items}].all(j, "
        f"!format.dns1123Subdomain().validate('{long_name}').hasValue()))"
    )
    with pytest.raises(CelError) as info:
        matches(expression)
    assert COST_LIMIT_MESSAGE in str(info.value)
