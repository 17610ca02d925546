"""Strict decoding: an object's fields against the OpenAPI schema of a Kubernetes release.

`kubectl apply` (server-side field validation, strict by default) refuses a
misspelt field (`exactly: {cout: 2}`) or a wrong type; a simulator that
silently drops the field would place a claim for one device where the user
meant two. The schemas come from kubernetes-validate, which ships the
OpenAPI schemas of every release in a strict form (unknown properties are
errors). The package's own `validate` re-reads the 1.5 MB definitions file
on every call and stops at the first error, so this module caches one
validator per release and kind and reports every error, as `FieldError`s
from `dra_driver.kube.validation`.

Two validators, one question each. jsonschema-rs (Rust) answers whether an
object is valid in about a microsecond; pure-Python jsonschema took 2 ms a
Pod and half of a 5,000-pod `dra-gpu simulate`. Most objects are valid, so
only the ones jsonschema-rs refuses (or cannot take: a YAML timestamp, a
non-string key) go to jsonschema, whose errors carry what the messages are
built from (the keyword, the schema, the path). Both read the same schema
files under Draft 2020-12 without format assertions; tests keep the two in
agreement. jsonschema and referencing are imported only then, so a command
reading valid objects does not pay for importing them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs

from dra_driver.kube.validation import FieldError, invalid, not_supported, required

if TYPE_CHECKING:
    import jsonschema
    import referencing

UNKNOWN_FIELD: Final = "unknown field"
_PACKAGE: Final = "kubernetes_validate"
_SCHEMA_ROOT: Final = "kubernetes-json-schema"
_TYPE_NAMES: Final = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
}
_lock = threading.Lock()


def strict_errors(obj: Mapping[str, Any], release: str) -> list[FieldError] | None:
    """Every unknown field and wrong type in `obj`; None when the release has no schema
    for the object's kind and apiVersion (a custom resource, say)."""
    schema_dir, name = _schema_dir(release), _schema_file(obj)
    fast = _fast_validator(schema_dir, name)
    if fast is None:
        return None
    try:
        if fast.is_valid(obj):
            return []
    except ValueError:  # a value JSON has no type for: jsonschema words the error
        pass
    validator = _validator(schema_dir, name)
    assert validator is not None  # the same file loaded for both
    errors: list[FieldError] = []
    for error in validator.iter_errors(dict(obj)):
        errors.extend(_field_errors(error))
    return sorted(errors, key=lambda e: e.field)


def unknown_field(path: str) -> FieldError:
    return FieldError(path, UNKNOWN_FIELD)


def describe(error: FieldError) -> str:
    """The apiserver's wording for an unknown field, `FieldError`'s for the rest."""
    if error.type == UNKNOWN_FIELD:
        return f'strict decoding error: unknown field "{error.field}"'
    return str(error)


def _field_errors(error: jsonschema.ValidationError) -> Iterable[FieldError]:
    path = _path(list(error.absolute_path))
    kind = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if kind == "additionalProperties" and isinstance(error.instance, Mapping):
        known = set(schema.get("properties") or {})
        patterns = [re.compile(p) for p in schema.get("patternProperties") or {}]
        for key in sorted(str(k) for k in error.instance):
            if key not in known and not any(p.search(key) for p in patterns):
                yield unknown_field(f"{path}.{key}" if path else key)
        return
    if kind == "required":
        missing = re.match(r"'(.+)' is a required property", error.message)
        name = missing.group(1) if missing else "?"
        yield required(f"{path}.{name}" if path else name)
        return
    if kind == "type":
        wanted: Any = error.validator_value
        names = [wanted] if isinstance(wanted, str) else list(wanted or [])
        text = " or ".join(_TYPE_NAMES.get(n, n) for n in names if n != "null")
        yield invalid(path or "(root)", error.instance, f"must be {text}")
        return
    if kind == "enum":
        allowed: Any = error.validator_value
        values = [str(v) for v in allowed or [] if v is not None]
        yield not_supported(path or "(root)", error.instance, values)
        return
    yield invalid(path or "(root)", error.instance, error.message)


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _schema_file(obj: Mapping[str, Any]) -> str:
    """`resourceclaim-resource-v1.json` for kind ResourceClaim, resource.k8s.io/v1."""
    api_version = str(obj.get("apiVersion") or "")
    prefix = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{str(obj.get('kind') or '').lower()}-{prefix}.json"


@functools.cache
def _schema_root() -> Path:
    """kubernetes-validate's schema folder, found without importing the package (its
    `__init__` imports jsonschema and more: a quarter of a second)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"No module named {_PACKAGE!r}", name=_PACKAGE)
    return Path(next(iter(spec.submodule_search_locations))) / _SCHEMA_ROOT


@functools.cache
def _schema_dir(release: str) -> str:
    """The strict schemas of the newest packaged release not newer than `release`."""
    wanted = _version(release)
    root = _schema_root()
    found = sorted(
        (_version(entry.name[1:].split("-")[0]), entry.name)
        for entry in root.iterdir()
        if entry.name.startswith("v") and entry.name.endswith("-local-strict")
    )
    usable = [name for version, name in found if version <= wanted]
    return usable[-1] if usable else found[0][1]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


def _fast_validator(schema_dir: str, name: str) -> jsonschema_rs.Validator | None:
    with _lock:
        return _cached_fast_validator(schema_dir, name)


@functools.cache
def _cached_fast_validator(schema_dir: str, name: str) -> jsonschema_rs.Validator | None:
    schema = _schema(schema_dir, name)
    if schema is None:
        return None
    return jsonschema_rs.Draft202012Validator(
        schema, registry=_fast_registry(schema_dir), validate_formats=False
    )


@functools.cache
def _fast_registry(schema_dir: str) -> jsonschema_rs.Registry:
    definitions = _definitions(schema_dir)
    return jsonschema_rs.Registry([(str(definitions["$id"]), definitions)])


@functools.cache
def _definitions(schema_dir: str) -> dict[str, Any]:
    definitions: dict[str, Any] = _load(schema_dir, "_definitions.json")
    return definitions


@functools.cache
def _schema(schema_dir: str, name: str) -> dict[str, Any] | None:
    """The schema file `name` (None where the release has none: a custom resource)."""
    if not name.split("-", maxsplit=1)[0] or "/" in name:
        return None
    try:
        schema: dict[str, Any] = _load(schema_dir, name)
    except FileNotFoundError:
        return None
    return schema


@functools.cache
def _registry(schema_dir: str) -> referencing.Registry[Any]:
    import referencing
    import referencing.jsonschema

    definitions = _definitions(schema_dir)
    resource = referencing.Resource.from_contents(
        definitions, default_specification=referencing.jsonschema.DRAFT202012
    )
    return resource @ referencing.Registry()


def _validator(schema_dir: str, name: str) -> jsonschema.Draft202012Validator | None:
    with _lock:
        return _cached_validator(schema_dir, name)


@functools.cache
def _cached_validator(schema_dir: str, name: str) -> jsonschema.Draft202012Validator | None:
    import jsonschema
    import referencing

    schema = _schema(schema_dir, name)
    if schema is None:
        return None
    registry = referencing.Resource.from_contents(schema) @ _registry(schema_dir)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _load(schema_dir: str, name: str) -> Any:
    path = _schema_root() / schema_dir / name
    return json.loads(path.read_text(encoding="utf-8"))
