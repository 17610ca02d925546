"""One claim's failure stays that claim's: the per-claim error text and parallel claims.

Both DRA services of this package (`kubelet_plugin.driver`, the GPU driver, and
`kubelet_plugin.compute_domain.driver`, the ComputeDomain driver) answer a kubelet call
for several claims at once. Each claim runs on its own thread, because a slow claim (a MIG
creation, a wait for IMEX) must not hold the others. Any exception becomes that claim's
one-line error, logged with the claim's identity; a traceback is logged only for an
exception that is not one of ours (a bug). This module is the one home of those two rules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from dra_driver.errors import DraGpuError
from dra_driver.log_safety import claim_fields, one_line
from kubelet_plugin.service import ClaimRef

__all__ = ["MAX_ERROR_CHARS", "MAX_PARALLEL_CLAIMS", "claim_error", "error_text", "in_parallel"]

log = logging.getLogger(__name__)

MAX_PARALLEL_CLAIMS: Final = 16
"""Claims of one kubelet call handled at once."""
MAX_ERROR_CHARS: Final = 2048
"""The longest error text a claim gets (the server cuts what it sends at its own limit)."""

_T = TypeVar("_T")
_R = TypeVar("_R")


def error_text(exc: BaseException) -> str:
    """`exc` on one line: our errors as they are, others with their type's name."""
    text = str(exc) if isinstance(exc, DraGpuError) else f"{type(exc).__name__}: {exc}"
    return one_line(text, MAX_ERROR_CHARS)


def claim_error(operation: str, ref: ClaimRef, exc: BaseException) -> str:
    """The one-line error a claim gets for `exc`; logged, with the traceback at debug level
    for an exception that is not one of ours (a bug, or input nothing checked)."""
    text = error_text(exc)
    if not isinstance(exc, DraGpuError):
        text = f"internal error: {text}"
        log.debug("%s %s: unexpected exception", operation, ref, exc_info=exc)
    log.warning(
        "%s %s/%s (%s): %s",
        operation,
        ref.namespace,
        ref.name,
        ref.uid,
        text,
        extra=claim_fields(ref.namespace, ref.name, ref.uid),
    )
    return text


def in_parallel(work: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """`work` over `items` on up to MAX_PARALLEL_CLAIMS threads, results in order."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), MAX_PARALLEL_CLAIMS)) as pool:
        return list(pool.map(work, items))
