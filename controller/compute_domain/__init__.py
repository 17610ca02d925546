"""The ComputeDomain controller (`dra-gpu compute-domain-controller`).

The one writer of ComputeDomainCliques and of `ComputeDomain.status`
(`dra_driver.compute_domain.membership` says who writes what). Pure parts
first, I/O last:

- `indices`: IMEX node indices per clique, given once per (domain, node).
- `status`: `status.nodes`, `status.status` and the conditions, from the
  members' reports.
- `reconcile`: one domain's desired writes (finalizer, workload template,
  cliques, status, deletion order), from what the store holds.
- `loop`: watches the store, debounces, applies the writes and posts Events.
- `leader`: leader election on a coordination.k8s.io/v1 Lease.
- `main`: the command's wiring (flags are parsed in `dra_driver.cli`).
"""
