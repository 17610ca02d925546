"""dra-gpu: a Dynamic Resource Allocation driver for NVIDIA GPUs.

This package is the shared core: the NVML interface and its backends, the
device model, CDI, the checkpoint, claim parsing and the cluster interface.
The node daemon lives in `kubelet_plugin`, slice publishing in `controller`.
"""

DEFAULT_DRIVER_NAME = "gpu.nvidia.com"
