"""YAML through libyaml's C parser and emitter: the one place that picks them.

PyYAML's pure-Python scanner and emitter took 70 % of a 5,000-pod
`dra-gpu simulate -o yaml` run, and the plugin reads a claim and writes a CDI
spec per Prepare. libyaml's C classes read and write the same documents five
to ten times faster. PyYAML's wheels ship libyaml; a PyYAML built without it
falls back to the Python classes, which give the same results.

Everything that reads or writes YAML in bulk goes through `load`, `load_all`,
`dump` and `dump_all` (safe loading and dumping only). Errors are PyYAML's
`YAMLError` (re-exported), whose marks `errors.yaml_problem` words.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

import yaml
from yaml import YAMLError

try:
    from yaml import CSafeDumper as SafeDumper
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper, SafeLoader  # type: ignore[assignment]

__all__ = ["SafeDumper", "SafeLoader", "YAMLError", "dump", "dump_all", "load", "load_all"]

Source = str | bytes | IO[str] | IO[bytes]


def load(source: Source, loader: type[SafeLoader] = SafeLoader) -> Any:
    """The one document in `source` (None for an empty one)."""
    return yaml.load(source, Loader=loader)


def load_all(source: Source) -> Iterator[Any]:
    """The documents in `source`, one by one (a YAMLError surfaces at the bad one)."""
    return yaml.load_all(source, Loader=SafeLoader)


def dump(data: Any, **options: Any) -> str:
    """`data` as block-style YAML; `options` are PyYAML's (`sort_keys`, `width`, ...)."""
    return dump_all([data], **options)


def dump_all(documents: Iterable[Any], **options: Any) -> str:
    """Several documents separated by `---`, like `dump`."""
    options.setdefault("default_flow_style", False)
    text: str = yaml.dump_all(documents, Dumper=SafeDumper, **options)
    return text
