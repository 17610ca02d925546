"""The Kubernetes CEL environment for DRA device selectors, on top of cel-python.

Selectors in DeviceClasses and ResourceClaims are CEL expressions over one
variable, `device`. This package compiles them the way the Kubernetes
scheduler does (same variable declaration, same function libraries: semver,
quantity, regex, lists, string and set extensions, `cel.bind`; same limits)
and evaluates them fast enough to run against thousands of devices:

    selector = compile_selector("device.attributes['gpu.nvidia.com'].type == 'gpu'")
    selector.matches(DeviceView(driver="gpu.nvidia.com",
                                attributes={"type": {"string": "gpu"}},
                                capacity={}))

cel-python supplies the grammar, parser and time types; the type checker,
interpreter, cost tracking and libraries live in the modules of this package.
Errors are `dra_driver.errors.CelError`.
"""

from dra_driver.scheduling.cel.device import DeviceView
from dra_driver.scheduling.cel.selector import CompiledSelector, clear_cache, compile_selector

__all__ = ["CompiledSelector", "DeviceView", "clear_cache", "compile_selector"]
