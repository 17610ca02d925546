"""Kubernetes' URL CEL library (k8s.io/apiserver/pkg/cel/library/urls.go).

In every Kubernetes CEL environment (environment/base.go, since 1.0):
`url(s)` (an absolute URI or an absolute path; Go's `url.ParseRequestURI`
checks it, `url.Parse` parses it), `isURL(s)`, and the `kubernetes.URL`
methods `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`
and `getQuery` (a map of lists of strings). Parsing is Go's `net/url`
(`goneturl.py`); two URLs are equal when they print the same. Costs are
upstream's: `url()` one string traversal, the getters and `isURL` 1.

Go 1.26 (Kubernetes 1.36 and later) refuses an http(s) host with more than one
colon outside brackets; Go 1.25 (Kubernetes 1.34, 1.35) takes the last
colon as the port. `goneturl.STRICT_COLONS` holds which, set per evaluation
by `selector.py` from the Kubernetes release being followed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.goneturl import URL as GoURL
from dra_driver.scheduling.cel.goneturl import URLError, parse, parse_request_uri
from dra_driver.scheduling.cel.types import BOOL, STRING, URL, list_of, map_of
from dra_driver.scheduling.cel.values import register_kind


class URLValue:
    """A value of CEL type `kubernetes.URL`."""

    __slots__ = ("url",)

    def __init__(self, url: GoURL) -> None:
        self.url = url

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URLValue) and other.url.string() == self.url.string()

    def __hash__(self) -> int:
        return hash(self.url.string())

    def __repr__(self) -> str:
        return f"url({self.url.string()!r})"


register_kind(URLValue, "kubernetes.URL")


def _url(text: str) -> URLValue:
    try:
        # ParseRequestURI decides what is a URL; Parse reads it (ParseRequestURI would
        # keep a fragment in the path or query).
        parse_request_uri(text)
        return URLValue(parse(text))
    except URLError as exc:
        raise FunctionError(f"URL parse error during conversion from string: {exc}") from None


def is_url(text: str) -> bool:
    try:
        parse_request_uri(text)
    except URLError:
        return False
    return True


def _scheme(u: URLValue) -> str:
    return u.url.scheme.decode("utf-8", "replace")


def _host(u: URLValue) -> str:
    return u.url.host.decode("utf-8", "replace")


def _hostname(u: URLValue) -> str:
    return u.url.hostname()


def _port(u: URLValue) -> str:
    return u.url.port()


def _escaped_path(u: URLValue) -> str:
    return u.url.escaped_path()


def _query(u: URLValue) -> dict[str, list[str]]:
    return u.url.query()


def _traverse(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0])


register("url", glob("string_to_url", (STRING,), URL, _url, _traverse))
register("isURL", glob("is_url_string", (STRING,), BOOL, is_url))
register("getScheme", member("url_get_scheme", (URL,), STRING, _scheme))
register("getHost", member("url_get_host", (URL,), STRING, _host))
register("getHostname", member("url_get_hostname", (URL,), STRING, _hostname))
register("getPort", member("url_get_port", (URL,), STRING, _port))
register("getEscapedPath", member("url_get_escaped_path", (URL,), STRING, _escaped_path))
register("getQuery", member("url_get_query", (URL,), map_of(STRING, list_of(STRING)), _query))
