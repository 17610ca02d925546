"""Bounded caches for pure functions: one helper, so every cache in the code works alike.

CEL selectors are compiled once per expression (as kube-scheduler's CEL
cache does), RE2 patterns and semvers once per string, quantity strings
parsed once: the same strings come back for every device of every node.
`memoized(maxsize)` is `functools.lru_cache` (thread-safe, least recently
used entries go first), with two additions:

* `errors=(SomeError,)` also remembers those exceptions, so an invalid
  selector is not compiled again on every lookup; each lookup raises a fresh
  copy (one exception object must not be raised in two threads at once: its
  traceback would be shared);
* every cache made here is registered, and `clear_caches()` empties them all
  (tests that count compilations start from nothing).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


class _Clearable(Protocol):
    def cache_clear(self) -> None: ...


_CACHES: list[_Clearable] = []


class _Raised:
    """A remembered exception, in the cache in place of a result."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def memoized(maxsize: int, *, errors: tuple[type[Exception], ...] = ()) -> Callable[[F], F]:
    """Decorator: cache up to `maxsize` results of a pure function (see the module docstring)."""

    def wrap(func: F) -> F:
        if not errors:
            cached = functools.lru_cache(maxsize=maxsize)(func)
            _CACHES.append(cached)
            return cast(F, cached)

        @functools.lru_cache(maxsize=maxsize)
        def outcome(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except errors as exc:
                return _Raised(exc)

        _CACHES.append(outcome)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = outcome(*args, **kwargs)
            if isinstance(result, _Raised):
                raise copy.copy(result.error).with_traceback(None)
            return result

        call.cache_clear = outcome.cache_clear  # type: ignore[attr-defined]
        call.cache_info = outcome.cache_info  # type: ignore[attr-defined]
        return cast(F, call)

    return wrap


def clear_caches() -> None:
    """Empty every cache made by `memoized`."""
    for cache in _CACHES:
        cache.cache_clear()
