"""What kube-scheduler would do, offline: CEL (`cel`), the allocator (`allocator`), and
`whatif`, the `dra-gpu simulate` and `dra-gpu explain` commands built on both.

Layered: `whatif` uses `allocator`, which uses `cel`; none of them is used by
the node daemon.
"""
