"""A truthful simulated GPU node for tests, the demo and benchmarks.

Nothing here touches real hardware. `models` holds the numbers real GPUs
report (from `gpu-mig-nvml.md`), `shapes` composes them into nodes,
`hardware.SimHardware` is the state machine that enforces NVML's MIG rules
(with an optional state file so several processes share one "machine", and an
optional fake `/proc` tree), and `nvml.SimNvml` serves it through the same
`Nvml` protocol the real backend implements.
"""
