"""NVML: the one door to GPU hardware.

`interface.Nvml` is the narrow protocol the rest of the code uses. Two
backends implement it: `real.RealNvml` on pynvml, and `dra_driver.hardware.simulated`, a
truthful simulated node used by tests and the demo. The composition root
(`dra_driver.composition.hardware.open_hardware`) picks one from a `--nvml` flag.
"""
