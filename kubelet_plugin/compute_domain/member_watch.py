"""Wait for this node's ComputeDomainMember to become Ready, on a condition variable.

Prepare of a channel claim must not hand out the channel before the node's
IMEX daemon is up (computedomain.md §3.4 step 5). NVIDIA's plugin GETs the
clique from the API server on every retry of a 250 ms..3 s backoff; a
readiness seen late costs seconds per pod (§7.7). Here one watch on the
members (`ObjectStore.watch_objects`) bumps a version under a condition
variable, and every waiting Prepare re-reads its own member when it changes,
so a member turned Ready by the node's IMEX host releases its Prepares at
once. A slow re-read every `POLL_S` covers a watch that missed an event.
The same watch calls `on_change`, which the plugin uses to republish its
channel with the domain it serves (`serving`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from dra_driver.compute_domain.membership import (
    NODE_LABEL,
    MemberStatus,
    member_spec,
    member_status,
)
from dra_driver.errors import ClusterError, NotFoundError
from dra_driver.kube.object_store import COMPUTE_DOMAIN_MEMBER, ObjectStore

POLL_S: Final = 1.0
"""Re-read a member at least this often while waiting, whatever the watch says."""


class MemberWatch:
    """The members of one namespace (the driver's), watched; `wait` for one of them."""

    def __init__(
        self,
        objects: ObjectStore,
        namespace: str,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._objects = objects
        self._on_change = on_change
        self._namespace = namespace
        self._changed = threading.Condition()
        self._version = 0

    def changed(self) -> None:
        """A member may have changed: wake every waiter (the watch calls this)."""
        with self._changed:
            self._version += 1
            self._changed.notify_all()
        self._on_change()

    def serving(self, node_name: str) -> str | None:
        """The UID of the domain `node_name` has a member of (the first, in the race of
        two that Prepare refuses); None when it has none."""
        for obj in self._objects.list_objects(
            COMPUTE_DOMAIN_MEMBER, self._namespace, labels={NODE_LABEL: node_name}
        ):
            try:
                return member_spec(obj).domain_uid
            except ClusterError:
                continue
        return None

    def run(self, stop: threading.Event) -> None:
        """Watch the members until `stop` is set (a thread of its own)."""
        self._objects.watch_objects([COMPUTE_DOMAIN_MEMBER], self.changed, stop)

    def status(self, name: str) -> MemberStatus | None:
        """The member's status now; None if there is no such member."""
        try:
            obj = self._objects.get_object(COMPUTE_DOMAIN_MEMBER, self._namespace, name)
        except NotFoundError:
            return None
        return member_status(obj)

    def wait(
        self, name: str, done: Callable[[MemberStatus], bool], timeout: float
    ) -> tuple[bool, MemberStatus | None]:
        """Wait up to `timeout` seconds until the member's status satisfies `done`.

        Returns (True, status) as soon as it does, else (False, the last status seen;
        None when the member does not exist).
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                seen = self._version
            status = self.status(name)
            if status is not None and done(status):
                return True, status
            left = deadline - time.monotonic()
            if left <= 0:
                return False, status
            with self._changed:
                if self._version == seen:
                    self._changed.wait(min(left, POLL_S))
