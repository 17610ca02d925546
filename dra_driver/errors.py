"""The one error hierarchy of dra-gpu.

Every error the project raises on purpose derives from `DraGpuError`, so a
caller can catch "anything dra-gpu refused" in one place, and each subclass
says which layer refused it. Messages name the object and the field at fault,
because the person reading them is an admin looking at a pending pod.

    DraGpuError
    ├── ConfigError            bad command line, shape file, or opaque config
    │   └── QuantityError      a string is not a Kubernetes quantity (`problem` says why)
    ├── NvmlError              an NVML call failed (carries the NVML return code)
    ├── InventoryError         the hardware cannot be turned into devices
    ├── SliceError             a ResourceSlice would break an API limit
    ├── ClusterError           reading or writing API objects failed
    │   ├── NotFoundError      the object does not exist
    │   ├── InvalidObjectError the object cannot be handled as it stands (retrying cannot help)
    │   └── ConflictError      stale resourceVersion/uid (HTTP 409)
    │       └── AlreadyExistsError   create found the name taken
    ├── ClaimError             a ResourceClaim cannot be prepared as it is
    │   └── StaleClaimError    a Prepare of a claim that is gone or going (a late retry)
    ├── CheckpointError        the checkpoint file cannot be read or written
    ├── CdiError               a CDI spec cannot be built or written
    ├── DriverRootError        the NVIDIA driver's files are not under the driver root
    ├── KernelModuleError      an NVIDIA kernel module is not loaded and cannot be loaded
    ├── CelError               a CEL selector does not compile or fails at run time
    ├── AllocationError        a claim cannot be allocated for a reason that is not "does not fit"
    ├── MpsError               an MPS control daemon cannot be started, configured or stopped
    ├── PassthroughError       a GPU cannot be moved between nvidia and vfio-pci (sysfs refused)
    ├── PluginError            the kubelet plugin cannot start or serve
    └── AdmissionError         a body sent to the admission webhook is not an AdmissionReview

Third-party exceptions (pynvml, kubernetes ApiException, OSError, yaml) are
wrapped with `raise ... from exc` at the I/O boundary so the cause is kept;
`yaml_problem` puts a YAML parser error on the one line such a message needs.
"""

from __future__ import annotations


class DraGpuError(Exception):
    """Base of every error dra-gpu raises on purpose."""


class ConfigError(DraGpuError):
    """A flag, a shape file or an opaque device config is invalid."""


class QuantityError(ConfigError):
    """A string is not a Kubernetes quantity.

    `problem` names the rule it breaks, so callers that must word it their
    own way (CEL uses apimachinery's messages) branch on it, not on the text:
    "format" (not a number with an optional suffix), "suffix" (an unknown
    unit) or "exponent" (a decimal exponent beyond the supported range).
    """

    def __init__(self, message: str, *, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


class NvmlError(DraGpuError):
    """An NVML call failed.

    `code` is the NVML return code (for example 23 for
    NVML_ERROR_INSUFFICIENT_RESOURCES), so callers can branch on it without
    parsing text; the constants live in `dra_driver.hardware.nvml.codes`.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class InventoryError(DraGpuError):
    """The discovered hardware cannot be described as devices."""


class SliceError(DraGpuError):
    """A ResourceSlice would violate a resource.k8s.io/v1 limit."""


class ClusterError(DraGpuError):
    """Reading or writing Kubernetes objects failed."""


class NotFoundError(ClusterError):
    """The requested Kubernetes object does not exist."""


class InvalidObjectError(ClusterError):
    """The object, as stored or as sent, cannot be handled: the same request fails again."""


class ConflictError(ClusterError):
    """A write lost a race: stale `resourceVersion` or `uid` (HTTP 409)."""


class AlreadyExistsError(ConflictError):
    """A create found the name already taken."""


class ClaimError(DraGpuError):
    """A ResourceClaim cannot be prepared as it stands (per-claim error)."""


class StaleClaimError(ClaimError):
    """A Prepare for a ResourceClaim that is gone or going (deleted, being deleted, or
    re-created under another UID): a late retry of the kubelet's, refused."""


class CheckpointError(DraGpuError):
    """The plugin's checkpoint file cannot be read or written."""


class CdiError(DraGpuError):
    """A CDI spec cannot be built or written."""


class DriverRootError(DraGpuError):
    """The NVIDIA driver's user-space files are not (yet) under the driver root."""


class KernelModuleError(DraGpuError):
    """An NVIDIA kernel module (nvidia-uvm) is not loaded and could not be loaded."""


class CelError(DraGpuError):
    """A CEL selector does not compile, or fails when evaluated.

    The message names the expression and the position (line:column) at fault.
    """

    def __init__(self, message: str, *, expression: str = "", position: str = "") -> None:
        super().__init__(message)
        self.expression = expression
        self.position = position


class AllocationError(DraGpuError):
    """Allocation is impossible for a reason the user must fix (bad class, bad CEL, limits).

    "Does not fit on this node" is not an error: the allocator returns no result.
    """


class GpuSettingError(DraGpuError):
    """A GPU setting (compute mode, time-slice interval) could not be applied.

    `not_supported` is True when the GPU does not have the setting at all
    (nvidia-smi's "Not Supported"), which a reset to the default may ignore.
    """

    def __init__(self, message: str, *, not_supported: bool = False) -> None:
        super().__init__(message)
        self.not_supported = not_supported


class MpsError(DraGpuError):
    """An MPS control daemon could not be started, configured or stopped."""


class PassthroughError(DraGpuError):
    """A GPU could not be bound to (or back from) vfio-pci: a sysfs write was refused, its
    VFIO node never appeared, or the GPU is not ours to move.

    `errno_code` is the kernel's errno of a refused write (EBUSY, ENODEV), None otherwise.
    """

    def __init__(self, message: str, *, errno_code: int | None = None) -> None:
        super().__init__(message)
        self.errno_code = errno_code


class PluginError(DraGpuError):
    """The kubelet plugin cannot start or serve."""


class AdmissionError(DraGpuError):
    """A request to the admission webhook is not an AdmissionReview it can answer (the
    webhook answers HTTP 400 with the message; a claim it refuses is no error)."""


def yaml_problem(exc: Exception) -> str:
    """A PyYAML error on one line: `line L, column C: <problem> (<context>)`.

    PyYAML's own text spans several lines and quotes the source with a caret,
    which reads badly after "dra-gpu simulate: <file>:". Duck-typed (the
    `problem`/`problem_mark`/`context` of `yaml.MarkedYAMLError`) so this
    module does not import yaml; other errors fall back to their text, joined.
    """
    problem = getattr(exc, "problem", None)
    if not problem:
        return " ".join(str(exc).split())
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    context = getattr(exc, "context", None)
    return f"{where}{problem}" + (f" ({context})" if context else "")
