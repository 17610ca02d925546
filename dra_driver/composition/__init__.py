"""What only the composition root (`dra_driver.cli`) puts together.

Each module here joins products that must otherwise stay apart, so that the
daemon, the controller and the node model never see the simulated GPUs
(`.importlinter` forbids it) and never branch on "is this simulated":

* `hardware` - the `--nvml` flag: real GPUs or a simulated node, as one `Hardware`;
* `simulated_nodes` - the ResourceSlices our plugin would publish for simulated
  nodes (simulator + controller), handed to `dra-gpu simulate`/`explain`;
* `plugin_process` - the real plugin daemon in a child process on a simulated
  node (the demo, the tests and the benchmarks drive it);
* `demo`, `demo_claims` - `dra-gpu demo`: simulated hardware + the plugin +
  the scheduler emulation, end to end;
* `compute_domain_cluster`, `compute_domain_kubelet`, `compute_domain_demo` - many
  simulated GB200 nodes running the ComputeDomain daemons as processes, a scheduler and
  kubelet stand-in for their pods, and `dra-gpu demo compute-domain`.

Nothing outside `dra_driver.cli` (and the tests and benchmarks) imports this package.
"""
