"""URLs parsed and printed like Go's `net/url` (Go 1.26), for Kubernetes' URL library.

`url()`, `isURL()` and `format.uri()` are `url.ParseRequestURI` and
`url.Parse`; the getters are the `URL` methods `Hostname`, `Port`,
`EscapedPath` and `Query`. Python's `urllib.parse` never rejects anything
and splits, escapes and unescapes differently, so Go's parser is written
here, following Go's source, with Go's error texts
(`parse "http://a b": invalid character " " in host name`).

Go works on bytes; so does this module (text is UTF-8 encoded first, and
results are decoded back, an invalid sequence made by `%`-unescaping
becoming U+FFFD). Behaviour that depends on Go's release:

* a bracketed host must be an IPv6 address (`netip.ParseAddr`; Go 1.24.8
  and 1.25.2 on), and a `[` anywhere else in the host is an error;
* `strict_colons` is Go 1.26's `urlstrictcolons=1`: an http or https host
  with more than one colon outside brackets is an error (Go 1.25 and
  earlier take the last colon as the port separator). Kubernetes 1.36
  builds with `godebug default=go1.26`, 1.35 with go1.25;
* a query with more than 10000 parameters decodes to no parameters
  (`urlmaxqueryparams`, Go 1.24.12 and 1.25.6 on).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from dra_driver.scheduling.cel.gostrings import go_quote
from dra_driver.scheduling.cel.netaddr import AddrError, parse_addr

# Encoding modes (net/url's `encoding`).
ENCODE_PATH: Final = 1
ENCODE_PATH_SEGMENT: Final = 2
ENCODE_HOST: Final = 3
ENCODE_ZONE: Final = 4
ENCODE_USER_PASSWORD: Final = 5
ENCODE_QUERY_COMPONENT: Final = 6
ENCODE_FRAGMENT: Final = 7

MAX_QUERY_PARAMS: Final = 10000

#: Go 1.26's `urlstrictcolons=1` (True) or Go 1.25's rule (False), for parses that do
#: not say; `selector.py` sets it per evaluation from the Kubernetes release.
STRICT_COLONS: Final[ContextVar[bool]] = ContextVar("go_url_strict_colons", default=True)

_HEXDIGITS: Final = frozenset(b"0123456789abcdefABCDEF")
_UPPERHEX: Final = b"0123456789ABCDEF"


class URLError(ValueError):
    """The text is not a URL Go accepts; the message is Go's `*url.Error` text."""


class _Fail(Exception):
    """An error inside the parser; the message is the wrapped error's."""


def _is_alnum(c: int) -> bool:
    return 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or 0x30 <= c <= 0x39


def should_escape(c: int, mode: int) -> bool:
    """Whether byte `c` is escaped in URL part `mode` (net/url's `shouldEscape`)."""
    if _is_alnum(c):
        return False
    if mode in (ENCODE_HOST, ENCODE_ZONE) and c in b"!$&'()*+,;=:[]<>\"":
        return False
    if c in b"-_.~":
        return False
    if c in b"$&+,/:;=?@":
        if mode == ENCODE_PATH:
            return c == ord("?")
        if mode == ENCODE_PATH_SEGMENT:
            return c in b"/;,?"
        if mode == ENCODE_USER_PASSWORD:
            return c in b"@/?:"
        if mode == ENCODE_QUERY_COMPONENT:
            return True
        if mode == ENCODE_FRAGMENT:
            return False
    return not (mode == ENCODE_FRAGMENT and c in b"!()*")


def _escape_error(text: bytes) -> _Fail:
    return _Fail("invalid URL escape " + go_quote(_decode(text)))


def unescape(s: bytes, mode: int) -> bytes:
    """`%XX` (and `+` in query components) decoded, with net/url's checks."""
    n = 0
    has_plus = False
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:  # %
            n += 1
            if i + 2 >= len(s) or s[i + 1] not in _HEXDIGITS or s[i + 2] not in _HEXDIGITS:
                raise _escape_error(s[i : i + 3])
            triplet = s[i : i + 3]
            if mode == ENCODE_HOST and int(chr(s[i + 1]), 16) < 8 and triplet != b"%25":
                raise _escape_error(triplet)
            if mode == ENCODE_ZONE:
                value = int(triplet[1:], 16)
                if triplet != b"%25" and value != 0x20 and should_escape(value, ENCODE_HOST):
                    raise _escape_error(triplet)
            i += 3
        elif c == 0x2B:  # +
            has_plus = mode == ENCODE_QUERY_COMPONENT
            i += 1
        else:
            if mode in (ENCODE_HOST, ENCODE_ZONE) and c < 0x80 and should_escape(c, mode):
                raise _Fail("invalid character " + go_quote(chr(c)) + " in host name")
            i += 1
    if n == 0 and not has_plus:
        return s
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
            continue
        if c == 0x2B and mode == ENCODE_QUERY_COMPONENT:
            out.append(0x20)
        else:
            out.append(c)
        i += 1
    return bytes(out)


def escape(s: bytes, mode: int) -> bytes:
    """Bytes that must be escaped in `mode` as `%XX` (space as `+` in query components)."""
    out = bytearray()
    for c in s:
        if c == 0x20 and mode == ENCODE_QUERY_COMPONENT:
            out.append(0x2B)
        elif should_escape(c, mode):
            out += b"%" + _UPPERHEX[c >> 4 : (c >> 4) + 1] + _UPPERHEX[c & 15 : (c & 15) + 1]
        else:
            out.append(c)
    return bytes(out)


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


@dataclass
class Userinfo:
    username: bytes
    password: bytes | None = None

    def string(self) -> bytes:
        text = escape(self.username, ENCODE_USER_PASSWORD)
        if self.password is not None:
            text += b":" + escape(self.password, ENCODE_USER_PASSWORD)
        return text


@dataclass
class URL:
    """A parsed URL (`url.URL`); byte fields, as Go keeps them."""

    scheme: bytes = b""
    opaque: bytes = b""
    user: Userinfo | None = None
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    omit_host: bool = False
    force_query: bool = False
    raw_query: bytes = b""
    fragment: bytes = b""
    raw_fragment: bytes = b""

    # -- the methods Kubernetes' library calls --------------------------------------

    def hostname(self) -> str:
        return _decode(_split_host_port(self.host)[0])

    def port(self) -> str:
        return _decode(_split_host_port(self.host)[1])

    def escaped_path(self) -> str:
        return _decode(self._escaped_path())

    def _escaped_path(self) -> bytes:
        if self.raw_path and _valid_encoded(self.raw_path, ENCODE_PATH):
            try:
                if unescape(self.raw_path, ENCODE_PATH) == self.path:
                    return self.raw_path
            except _Fail:
                pass
        if self.path == b"*":
            return b"*"
        return escape(self.path, ENCODE_PATH)

    def _escaped_fragment(self) -> bytes:
        if self.raw_fragment and _valid_encoded(self.raw_fragment, ENCODE_FRAGMENT):
            try:
                if unescape(self.raw_fragment, ENCODE_FRAGMENT) == self.fragment:
                    return self.raw_fragment
            except _Fail:
                pass
        return escape(self.fragment, ENCODE_FRAGMENT)

    def query(self) -> dict[str, list[str]]:
        """`URL.Query()`: the decoded parameters; malformed ones are left out."""
        return parse_query(self.raw_query)

    def string(self) -> str:
        """`URL.String()`: the URL reassembled."""
        out = bytearray()
        if self.scheme:
            out += self.scheme + b":"
        if self.opaque:
            out += self.opaque
        else:
            has_authority = self.scheme or self.host or self.user is not None
            if has_authority and not (self.omit_host and not self.host and self.user is None):
                if self.host or self.path or self.user is not None:
                    out += b"//"
                if self.user is not None:
                    out += self.user.string() + b"@"
                if self.host:
                    out += escape(self.host, ENCODE_HOST)
            path = self._escaped_path()
            if self.omit_host and not self.host and self.user is None and path.startswith(b"//"):
                # A path starting with // and no authority is written %2F/...
                out += b"%2F"
                path = path[1:]
            if path and path[0] != 0x2F and self.host:
                out += b"/"
            if not out:
                segment = path.split(b"/", 1)[0]
                if b":" in segment:
                    out += b"./"
            out += path
        if self.force_query or self.raw_query:
            out += b"?" + self.raw_query
        if self.fragment:
            out += b"#" + self._escaped_fragment()
        return _decode(bytes(out))


def _valid_encoded(s: bytes, mode: int) -> bool:
    for c in s:
        if c in b"!$&'()*+,;=:@[]%":
            continue
        if should_escape(c, mode):
            return False
    return True


def _split_host_port(host_port: bytes) -> tuple[bytes, bytes]:
    host, port = host_port, b""
    colon = host.rfind(b":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


def _valid_optional_port(port: bytes) -> bool:
    if not port:
        return True
    if port[0] != 0x3A:
        return False
    return all(0x30 <= c <= 0x39 for c in port[1:])


def _get_scheme(raw: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(raw):
        if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            continue
        if 0x30 <= c <= 0x39 or c in b"+-.":
            if i == 0:
                return b"", raw
            continue
        if c == 0x3A:
            if i == 0:
                raise _Fail("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _valid_userinfo(s: bytes) -> bool:
    text = s.decode("utf-8", errors="surrogateescape")
    for ch in text:
        if ch.isascii() and (ch.isalnum() or ch in "-._:~!$&'()*+,;=%@"):
            continue
        return False
    return True


def _parse_host(scheme: bytes, host: bytes, strict_colons: bool) -> bytes:
    open_bracket = host.rfind(b"[")
    if open_bracket > 0:
        raise _Fail("invalid IP-literal")
    if open_bracket == 0:
        close = host.rfind(b"]")
        if close < 0:
            raise _Fail("missing ']' in host")
        colon_port = host[close + 1 :]
        if not _valid_optional_port(colon_port):
            raise _Fail("invalid port " + go_quote(_decode(colon_port)) + " after host")
        colon_port = unescape(colon_port, ENCODE_HOST)
        hostname = host[1:close]
        zone = hostname.find(b"%25")
        if zone >= 0:
            unescaped = unescape(hostname[:zone], ENCODE_HOST) + unescape(
                hostname[zone:], ENCODE_ZONE
            )
        else:
            unescaped = unescape(hostname, ENCODE_HOST)
        try:
            addr = parse_addr(_decode(unescaped))
        except AddrError as exc:
            raise _Fail(f"invalid host: {exc}") from None
        if addr.is4:
            raise _Fail("invalid IP-literal")
        return b"[" + unescaped + b"]" + colon_port
    first = host.find(b":")
    if first != -1:
        last = host.rfind(b":")
        if last != first and (scheme not in (b"http", b"https") or not strict_colons):
            first = last
        colon_port = host[first:]
        if not _valid_optional_port(colon_port):
            raise _Fail("invalid port " + go_quote(_decode(colon_port)) + " after host")
    return unescape(host, ENCODE_HOST)


def _parse_authority(
    scheme: bytes, authority: bytes, strict_colons: bool
) -> tuple[Userinfo | None, bytes]:
    at = authority.rfind(b"@")
    host = _parse_host(scheme, authority[at + 1 :] if at >= 0 else authority, strict_colons)
    if at < 0:
        return None, host
    userinfo = authority[:at]
    if not _valid_userinfo(userinfo):
        raise _Fail("net/url: invalid userinfo")
    if b":" not in userinfo:
        return Userinfo(unescape(userinfo, ENCODE_USER_PASSWORD)), host
    username, password = userinfo.split(b":", 1)
    return (
        Userinfo(
            unescape(username, ENCODE_USER_PASSWORD), unescape(password, ENCODE_USER_PASSWORD)
        ),
        host,
    )


def _parse(raw: bytes, via_request: bool, strict_colons: bool) -> URL:
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise _Fail("net/url: invalid control character in URL")
    if not raw and via_request:
        raise _Fail("empty url")
    url = URL()
    if raw == b"*":
        url.path = b"*"
        return url
    scheme, rest = _get_scheme(raw)
    url.scheme = scheme.lower()
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        url.force_query = True
        rest = rest[:-1]
    else:
        rest, _, url.raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if url.scheme:
            url.opaque = rest
            return url
        if via_request:
            raise _Fail("invalid URI for request")
        if b":" in rest.split(b"/", 1)[0]:
            raise _Fail("first path segment in URL cannot contain colon")
    if (url.scheme or (not via_request and not rest.startswith(b"///"))) and rest.startswith(b"//"):
        authority, slash, path = rest[2:].partition(b"/")
        rest = slash + path
        url.user, url.host = _parse_authority(url.scheme, authority, strict_colons)
    elif url.scheme and rest.startswith(b"/"):
        url.omit_host = True
    url.path, url.raw_path = _set_encoded(rest, ENCODE_PATH)
    return url


def _set_encoded(text: bytes, mode: int) -> tuple[bytes, bytes]:
    """The decoded part and its raw form, kept only when escaping would not reproduce it."""
    decoded = unescape(text, mode)
    return decoded, (b"" if escape(decoded, mode) == text else text)


def _error(text: bytes, message: str) -> URLError:
    return URLError(f"parse {go_quote(_decode(text))}: {message}")


def parse(text: str, *, strict_colons: bool | None = None) -> URL:
    """`url.Parse`: any URL reference; raises URLError."""
    if strict_colons is None:
        strict_colons = STRICT_COLONS.get()
    raw = text.encode("utf-8", errors="surrogatepass")
    before, hash_mark, fragment = raw.partition(b"#")
    try:
        url = _parse(before, False, strict_colons)
    except _Fail as exc:
        raise _error(before, str(exc)) from None
    if not hash_mark or not fragment:
        return url
    try:
        url.fragment, url.raw_fragment = _set_encoded(fragment, ENCODE_FRAGMENT)
    except _Fail as exc:
        raise _error(raw, str(exc)) from None
    return url


def parse_request_uri(text: str, *, strict_colons: bool | None = None) -> URL:
    """`url.ParseRequestURI`: an absolute URL or an absolute path; raises URLError."""
    if strict_colons is None:
        strict_colons = STRICT_COLONS.get()
    raw = text.encode("utf-8", errors="surrogatepass")
    try:
        return _parse(raw, True, strict_colons)
    except _Fail as exc:
        raise _error(raw, str(exc)) from None


def parse_query(query: bytes) -> dict[str, list[str]]:
    """`url.ParseQuery`, keeping the well-formed parameters (as `URL.Query` does)."""
    values: dict[str, list[str]] = {}
    if query.count(b"&") + 1 > MAX_QUERY_PARAMS:
        return values
    for part in query.split(b"&"):
        if b";" in part or not part:
            continue
        key, _, value = part.partition(b"=")
        try:
            decoded_key = _decode(unescape(key, ENCODE_QUERY_COMPONENT))
            decoded_value = _decode(unescape(value, ENCODE_QUERY_COMPONENT))
        except _Fail:
            continue
        values.setdefault(decoded_key, []).append(decoded_value)
    return values
