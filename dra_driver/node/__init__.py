"""The node model: what a node's GPUs are and how they look to Kubernetes.

`inventory` reads NVML once; `devices` turns that into allocatable devices
with NVIDIA's names, attributes and capacities; `dynamic_mig` and
`placement_order` add the partitionable MIG devices; `consumable_shares`
the shared GPUs; `health` the taints. `host` reads the host files beside
NVML; `mig_status` renders the live MIG layout; `device_classes` ships the
default DeviceClasses.
"""
