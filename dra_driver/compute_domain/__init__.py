"""The second driver, `compute-domain.nvidia.com`: ComputeDomains (multi-node NVLink via IMEX).

NVIDIA ships ComputeDomains as a separate DRA driver beside `gpu.nvidia.com`:
a namespaced `resource.nvidia.com/v1beta1` ComputeDomain names a
ResourceClaimTemplate that a controller creates, and a node plugin hands each
workload container an IMEX channel. This package is that driver's own room.
It shares the claim, CDI, checkpoint and NVLink-fabric machinery of
`dra_driver` and the GPU driver never imports it (`.importlinter`).

What exists (pure, no I/O): the user API (`api`), the opaque device configs
(`configs`), the workload ResourceClaimTemplate the controller creates
(`templates`) and what a node publishes (`devices`). The controller, the
kubelet plugin and the IMEX host are not built yet (docs/compute-domains.md).
"""
