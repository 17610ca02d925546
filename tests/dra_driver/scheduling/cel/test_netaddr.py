"""IP addresses and prefixes as Go's net/netip parses, prints and classifies them."""

from __future__ import annotations

import pytest

from dra_driver.scheduling.cel.netaddr import AddrError, parse_addr, parse_prefix


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("192.168.0.1", "192.168.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("::", "::"),
        ("::1", "::1"),
        ("2001:DB8::68", "2001:db8::68"),
        ("2001:db8:0:0:0:0:0:abcd", "2001:db8::abcd"),
        # RFC 5952: the longest run of zero groups, the first of equal runs; not a single one.
        ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),
        ("1:0:0:1:0:0:1:1", "1::1:0:0:1:1"),
        ("1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"),
        ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"),
        ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
        ("::ffff:c0a8:1", "::ffff:192.168.0.1"),
        ("1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"),
        ("fe80::1%eth0", "fe80::1%eth0"),
    ],
)
def test_addresses_print_in_netip_canonical_form(text: str, printed: str) -> None:
    assert str(parse_addr(text)) == printed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.2.3", 'ParseAddr("1.2.3"): IPv4 address too short'),
        ("1.2.3.4.5", 'ParseAddr("1.2.3.4.5"): IPv4 address too long'),
        ("01.2.3.4", 'ParseAddr("01.2.3.4"): IPv4 field has octet with leading zero'),
        ("256.1.1.1", 'ParseAddr("256.1.1.1"): IPv4 field has value >255'),
        ("1..2.3", 'ParseAddr("1..2.3"): IPv4 field must have at least one digit (at ".2.3")'),
        ("1.2.3.a", 'ParseAddr("1.2.3.a"): unexpected character (at "a")'),
        ("abc", 'ParseAddr("abc"): unable to parse IP'),
        ("%eth0", 'ParseAddr("%eth0"): missing IPv6 address'),
        ("fe80::1%", 'ParseAddr("fe80::1%"): zone must be a non-empty string'),
        ("12345::", 'ParseAddr("12345::"): each group must have 4 or less digits (at "12345::")'),
        ("1::2::3", 'ParseAddr("1::2::3"): multiple :: in address (at ":3")'),
        ("1:2", 'ParseAddr("1:2"): address string too short'),
        ("1:", 'ParseAddr("1:"): colon must be followed by more characters (at ":")'),
        (
            "1:2:3:4:5:6:7:8::",
            'ParseAddr("1:2:3:4:5:6:7:8::"): the :: must expand to at least one field of zeros',
        ),
        (
            "1:2:3:4:5:6:7:8:9",
            'ParseAddr("1:2:3:4:5:6:7:8:9"): trailing garbage after address (at "9")',
        ),
        (
            "1:2:3:4:5:6:7:1.2.3.4",
            'ParseAddr("1:2:3:4:5:6:7:1.2.3.4"): embedded IPv4 address must replace the final '
            '2 fields of the address (at "1.2.3.4")',
        ),
    ],
)
def test_invalid_addresses_are_refused_with_go_messages(text: str, message: str) -> None:
    with pytest.raises(AddrError) as info:
        parse_addr(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0", (True, False, False, False, False)),
        ("255.255.255.255", (False, False, False, False, False)),
        ("127.1.2.3", (False, True, False, False, False)),
        ("224.0.0.251", (False, False, True, False, False)),
        ("224.0.1.1", (False, False, False, False, False)),  # multicast, not link-local
        ("169.254.1.1", (False, False, False, True, False)),
        ("10.1.2.3", (False, False, False, False, True)),  # private is still global in Go
        ("::", (True, False, False, False, False)),
        ("::1", (False, True, False, False, False)),
        ("ff02::fb", (False, False, True, False, False)),
        ("fe80::1", (False, False, False, True, False)),
        ("fd00::1", (False, False, False, False, True)),
        ("::ffff:127.0.0.1", (False, True, False, False, False)),  # netip unmaps first
    ],
)
def test_classification_follows_netip(text: str, expected: tuple[bool, ...]) -> None:
    """(unspecified, loopback, link-local multicast, link-local unicast, global unicast)."""
    addr = parse_addr(text)
    assert (
        addr.is_unspecified(),
        addr.is_loopback(),
        addr.is_link_local_multicast(),
        addr.is_link_local_unicast(),
        addr.is_global_unicast(),
    ) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.2.3.4", "netip.ParsePrefix(\"1.2.3.4\"): no '/'"),
        ("1.2.3.4/", 'netip.ParsePrefix("1.2.3.4/"): bad bits after slash: ""'),
        ("1.2.3.4/01", 'netip.ParsePrefix("1.2.3.4/01"): bad bits after slash: "01"'),
        ("1.2.3.4/+8", 'netip.ParsePrefix("1.2.3.4/+8"): bad bits after slash: "+8"'),
        ("1.2.3.4/33", 'netip.ParsePrefix("1.2.3.4/33"): prefix length out of range'),
        ("::/129", 'netip.ParsePrefix("::/129"): prefix length out of range'),
        (
            "fe80::1%eth0/64",
            'netip.ParsePrefix("fe80::1%eth0/64"): IPv6 zones cannot be present in a prefix',
        ),
        (
            "1.2.3/24",
            'netip.ParsePrefix("1.2.3/24"): ParseAddr("1.2.3"): IPv4 address too short',
        ),
    ],
)
def test_invalid_prefixes_are_refused_with_go_messages(text: str, message: str) -> None:
    with pytest.raises(AddrError) as info:
        parse_prefix(text)
    assert str(info.value) == message


def test_prefixes_keep_host_bits_until_masked() -> None:
    prefix = parse_prefix("192.168.7.9/16")
    assert str(prefix) == "192.168.7.9/16"
    assert str(prefix.masked()) == "192.168.0.0/16"
    assert str(parse_prefix("2001:db8:1::5/32").masked()) == "2001:db8::/32"
    assert str(parse_prefix("10.0.0.1/0").masked()) == "0.0.0.0/0"


def test_containment_needs_the_same_family() -> None:
    net4 = parse_prefix("10.0.0.0/8")
    assert net4.contains(parse_addr("10.255.0.1"))
    assert not net4.contains(parse_addr("11.0.0.1"))
    assert not net4.contains(parse_addr("::ffff:10.0.0.1"))  # IPv4-mapped is IPv6
    assert parse_prefix("0.0.0.0/0").contains(parse_addr("8.8.8.8"))
    assert not parse_prefix("::/0").contains(parse_addr("8.8.8.8"))
    assert parse_prefix("10.0.0.0/8").overlaps(parse_prefix("10.1.0.0/16"))
    assert not parse_prefix("10.0.0.0/16").overlaps(parse_prefix("10.1.0.0/16"))
    assert not parse_prefix("::/0").overlaps(parse_prefix("0.0.0.0/0"))
