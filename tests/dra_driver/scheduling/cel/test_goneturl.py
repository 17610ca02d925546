"""URLs as Go's net/url (Go 1.26) parses and prints them."""

from __future__ import annotations

import pytest

from dra_driver.scheduling.cel.goneturl import (
    MAX_QUERY_PARAMS,
    URLError,
    parse,
    parse_query,
    parse_request_uri,
)


@pytest.mark.parametrize(
    ("text", "scheme", "host", "path", "printed"),
    [
        ("http://www.google.com", "http", "www.google.com", "", None),
        ("http://www.google.com/file%20one%26two", "http", "www.google.com", "/file one&two", None),
        ("http:www.google.com/?q=go+language", "http", "", "", None),  # opaque
        ("mailto:/webmaster@golang.org", "mailto", "", "/webmaster@golang.org", None),
        ("//foo", "", "foo", "", None),
        ("///threeslashes", "", "", "///threeslashes", None),
        (
            "http://j@ne:password@google.com",
            "http",
            "google.com",
            "",
            "http://j%40ne:password@google.com",
        ),
        ("MaIlTo:webmaster@golang.org", "mailto", "", "", "mailto:webmaster@golang.org"),
        ("http://[fe80::1%25en0]:8080/", "http", "[fe80::1%en0]:8080", "/", None),
        (
            "http://rest.rsc.io/foo%2fbar/baz%2Fquux?alt=media",
            "http",
            "rest.rsc.io",
            "/foo/bar/baz/quux",
            None,
        ),
        ("mysql://a,b,c/bar", "mysql", "a,b,c", "/bar", None),
        ("http://host/!$&'()*+,;=:@[hello]", "http", "host", "/!$&'()*+,;=:@[hello]", None),
        (
            "http://hello.%e4%b8%96%e7%95%8c.com/foo",
            "http",
            "hello.世界.com",
            "/foo",
            "http://hello.%E4%B8%96%E7%95%8C.com/foo",
        ),
        ("http://example.com//foo", "http", "example.com", "//foo", None),
        ("magnet:?xt=urn:btih:c12fe1c06bba254a9dc9f519b335aa7c1367a88a&dn", "magnet", "", "", None),
    ],
)
def test_parse_and_print_round_trip(
    text: str, scheme: str, host: str, path: str, printed: str | None
) -> None:
    url = parse(text)
    assert url.scheme.decode() == scheme
    assert url.host.decode() == host
    assert url.path.decode() == path
    assert url.string() == (printed or text)


@pytest.mark.parametrize(
    "text",
    [
        "http://foo.com",
        "/",
        "//not.a.user@not.a.host/just/a/path",
        "*",
        "http://[fe80::1]:8080/",
        "http://[fe80::1%25en0]/",
        "http://[fe80::1%25%65%6e%301-._~]:8080/",
        "https:://kubernetes.io/",
    ],
)
def test_request_uris_go_accepts(text: str) -> None:
    parse_request_uri(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("foo.html", "invalid URI for request"),
        ("../dir/", "invalid URI for request"),
        (" http://foo.com", "invalid URI for request"),
        ("", "empty url"),
        (":foo", "missing protocol scheme"),
        ("http://a\x7fb/", "net/url: invalid control character in URL"),
        ("http://192.168.0.%31/", 'invalid URL escape "%31"'),
        ("http://[fe80::%31]/", 'invalid URL escape "%31"'),
        ("http://[fe80::1%en0]/", 'invalid URL escape "%en"'),
        ("http://a b.com/", 'invalid character " " in host name'),
        ("http://[::1/", "missing ']' in host"),
        ("http://[::1]x/", 'invalid port "x" after host'),
        ("http://x[::1]/", "invalid IP-literal"),
        ("http://[1.2.3.4]/", "invalid IP-literal"),
        ("http://[::1::2]/", "invalid host: ParseAddr"),
        ("http://a:b@c:d/", 'invalid port ":d" after host'),
        ("http://a%zz@b/", 'invalid URL escape "%zz"'),
        ("http://u^ser@host/", "net/url: invalid userinfo"),
    ],
)
def test_request_uris_go_refuses(text: str, reason: str) -> None:
    with pytest.raises(URLError) as info:
        parse_request_uri(text)
    assert str(info.value).startswith('parse "')
    assert reason in str(info.value)


def test_colons_in_a_host_depend_on_the_go_release() -> None:
    # Go 1.26 refuses an http(s) host with more than one colon; Go 1.25 took the last one.
    with pytest.raises(URLError, match='invalid port ":b:80" after host'):
        parse_request_uri("http://a:b:80/")
    lax = parse_request_uri("http://a:b:80/", strict_colons=False)
    assert (lax.hostname(), lax.port()) == ("a:b", "80")
    # Other schemes keep the last colon either way (go.dev/issue/78077).
    assert parse_request_uri("postgres://h1:5432,h2:5433/db").port() == "5433"
    # Bracketed IPv6 hosts are the way to write addresses with colons.
    url = parse_request_uri("https://[2001:db8::1]:443/")
    assert (url.hostname(), url.port()) == ("2001:db8::1", "443")


def test_hostname_port_and_escaped_path() -> None:
    url = parse("https://user:pass@example.com:80/path with spaces/?q=1#frag")
    assert url.hostname() == "example.com"
    assert url.port() == "80"
    assert url.escaped_path() == "/path%20with%20spaces/"
    assert parse("https://example.com:/x").port() == ""
    assert parse("https://[::1]").hostname() == "::1"
    assert parse("/only/a/path").hostname() == ""


def test_query_keeps_the_well_formed_parameters() -> None:
    assert parse_query(b"a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}
    assert parse_query(b"x=a+b%20c&&flag") == {"x": ["a b c"], "flag": [""]}
    assert parse_query(b"bad=%zz&semi=1;2&good=ok") == {"good": ["ok"]}
    assert parse_query(b"&".join(b"k=v" for _ in range(MAX_QUERY_PARAMS))) == {
        "k": ["v"] * MAX_QUERY_PARAMS
    }
    assert parse_query(b"&".join(b"k=v" for _ in range(MAX_QUERY_PARAMS + 1))) == {}
