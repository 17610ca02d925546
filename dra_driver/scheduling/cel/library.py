"""Loads every function library into the registry, in one place.

Importing this module registers the standard functions and operators, the
string, list, set and time extensions, the Kubernetes libraries (semver,
quantity, lists, regex, URL, IP, CIDR, named formats) and optional types.
The checker and interpreter only consult `functions.FUNCTIONS`; this import
makes sure it is complete.
"""

from __future__ import annotations

from dra_driver.scheduling.cel import (  # noqa: F401 - imported for their registrations
    lib_format,
    lib_kubernetes_lists,
    lib_lists,
    lib_network,
    lib_optional,
    lib_quantity,
    lib_regex,
    lib_semver,
    lib_sets,
    lib_standard,
    lib_strings,
    lib_time,
    lib_url,
)
from dra_driver.scheduling.cel.functions import FUNCTIONS

__all__ = ["FUNCTIONS"]
