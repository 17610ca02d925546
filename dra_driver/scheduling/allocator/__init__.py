"""A pure Python port of kube-scheduler's structured DRA allocator.

Given ResourceSlices, DeviceClasses, the devices other claims already hold and
a node, `Allocator.allocate` finds devices for a pod's ResourceClaims exactly
the way the scheduler's `k8s.io/dynamic-resource-allocation/structured`
allocator does, and returns the `status.allocation` it would write. Every
decision can be traced (`ExplainRecorder`) so `dra-gpu explain` can say why a
device was not used.

Where this differs from upstream (all deliberate, all small):

* Pool order: sorted by (driver, pool name); upstream iterates a Go map, so
  its order is unspecified. Slices keep input order, devices slice order.
* Bugs of the 1.34/1.35 code that later upstream releases fixed are not
  reproduced: a device refused for a taint or a constraint gives its counter
  reservation back, and `distinctAttribute` remembers every value of a request
  with count > 1 (1.34/1.35 keyed values by request name and forgot some).
* `distinctAttribute` is only accepted with DRAConsumableCapacity on (the
  apiserver drops the field otherwise) and is refused with an error instead of
  "empty constraint".
* The slots of one request only try devices after the previous slot's device
  (upstream's later "combinations" optimisation); the first solution is the
  same, except that one request no longer takes two shares of the same
  multi-allocatable device.
* Step rounding of consumable capacity uses the integer `Value()` arithmetic
  of 1.34/1.35 (not the milli-value path of later releases).
* Binding conditions: devices with them are excluded unless the gate is on,
  and copied into results when it is; pools with binding conditions are not
  moved to the end of the search order (experimental upstream behaviour).
* [1.35] counter-only slices that name another node are not "always taken"
  for every node (as 1.35's GatherPools does) but only read through a pool the
  node can see, as newer upstream does: a pool of another node no longer shows
  up (and can't fail an All request or report itself invalid) on this node.
* Upstream's ErrFailedAllocationOnNode wrapping of "invalid resource pools" is
  `InvalidPoolsError`; `Allocator.first_fit` gives it the scheduler's meaning
  (only reported when no node fits).
"""

from dra_driver.scheduling.allocator.allocator import Allocator, InvalidPoolsError
from dra_driver.scheduling.allocator.features import ALLOCATION_RESULTS_MAX_SIZE, Features, Release
from dra_driver.scheduling.allocator.nodes import Node
from dra_driver.scheduling.allocator.selectors import CelSelectorEvaluator, SelectorEvaluator
from dra_driver.scheduling.allocator.state import AllocatedState, claim_key
from dra_driver.scheduling.allocator.trace import (
    AllocationFinished,
    DeviceChosen,
    DeviceRef,
    DeviceRejected,
    DeviceReleased,
    ExplainRecorder,
    Explanation,
    PoolSkipped,
    Reason,
    RequestNote,
    TraceEvent,
    Tracer,
    render_explanation,
)

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocatedState",
    "AllocationFinished",
    "Allocator",
    "CelSelectorEvaluator",
    "DeviceChosen",
    "DeviceRef",
    "DeviceRejected",
    "DeviceReleased",
    "ExplainRecorder",
    "Explanation",
    "Features",
    "InvalidPoolsError",
    "Node",
    "PoolSkipped",
    "Reason",
    "Release",
    "RequestNote",
    "SelectorEvaluator",
    "TraceEvent",
    "Tracer",
    "claim_key",
    "render_explanation",
]
