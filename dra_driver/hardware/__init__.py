"""GPU hardware: the seams production code sees it through, and the simulated GPUs.

* `machine.Hardware` - every seam in one value: NVML, the host's procfs, the
  driver's user space (and its MPS control binary), the GPU policy, health events;
* `nvml` - the `Nvml` protocol (the one door to GPUs) and its pynvml backend;
* `gpu_policy` - compute mode and time-slice: the `GpuPolicy` protocol and nvidia-smi;
* `simulated` - a truthful simulated node behind the same seams (NVML, GPU
  policy, and a fake driver root whose `nvidia-cuda-mps-control` runs a
  simulated MPS daemon), for tests, the demo and `--nvml sim:<shape>`.

Only the composition root (`dra_driver.cli`, through `dra_driver.composition.hardware`)
chooses between real and simulated; `.importlinter` keeps `simulated` out of
the daemon, the controller and the node model.
"""
