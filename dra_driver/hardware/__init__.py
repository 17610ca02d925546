"""GPU hardware: NVML (`nvml`, the one door to real GPUs) and simulated GPUs (`simulated`).

Production code talks to the `nvml.interface.Nvml` protocol only. The
simulated node implements the same protocol (and the GPU-policy and MPS
daemon seams) for tests, the demo and `--nvml sim:<shape>`; only the
composition root (`dra_driver.cli`) chooses it.
"""
