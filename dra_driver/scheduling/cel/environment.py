"""What a Kubernetes release gives DRA selectors: CEL libraries and Go runtime behaviour.

kube-scheduler compiles stored selectors with the `StoredExpressions`
environment of k8s.io/apiserver/pkg/cel/environment/base.go, which holds
every library introduced up to the binary's release. `LIBRARIES` records
when each library this package implements was introduced there (the
releases this project follows, 1.34 to 1.37, have them all).

One behaviour depends on the Go release the binaries are built with: the
`godebug default=go1.NN` line of Kubernetes' go.mod decides net/url's colon
rule (go1.24 for Kubernetes 1.34, go1.25 for 1.35, go1.26 from 1.36, whose
`urlstrictcolons=1` refuses an http(s) host with more than one colon).
"""

from __future__ import annotations

from typing import Final

#: Library (as base.go enables it) -> the Kubernetes release that introduced it.
LIBRARIES: Final = {
    "ext.Strings(version 2)": "1.29",
    "library.URLs": "1.0",
    "library.Regex": "1.0",
    "library.Lists": "1.0",
    "cel.OptionalTypes": "1.28",
    "library.Quantity": "1.28",
    "literal validators (duration, timestamp, regex, homogeneous literals)": "1.29",
    "ext.Sets": "1.29",
    "library.IP": "1.30",
    "library.CIDR": "1.30",
    "library.Format": "1.31",
    "ext.TwoVarComprehensions": "1.32",
    "library.SemverLib(version 1)": "1.33",
    "ext.Lists(version 3)": "1.34",
    "library.Lists(version 1)": "1.37",
}

#: The first release built with `godebug default=go1.26` (net/url's strict colons).
STRICT_URL_COLONS_SINCE: Final = (1, 36)


def _release(release: str) -> tuple[int, int]:
    major, _, minor = release.partition(".")
    try:
        return int(major), int(minor)
    except ValueError:
        raise ValueError(f"Kubernetes release {release!r} is not MAJOR.MINOR") from None


def enabled(library: str, release: str) -> bool:
    """Whether `release`'s base environment has `library` (a key of `LIBRARIES`)."""
    return _release(release) >= _release(LIBRARIES[library])


def strict_url_colons(release: str | None) -> bool:
    """Whether `release`'s kube-scheduler parses URLs with Go 1.26's strict colons.

    None means the newest release.
    """
    return release is None or _release(release) >= STRICT_URL_COLONS_SINCE
