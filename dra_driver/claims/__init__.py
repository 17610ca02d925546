"""Claims on the node: what a ResourceClaim asks for and what was prepared for it.

`allocated` turns an allocated ResourceClaim into the facts Prepare acts on,
`device_config` decodes NVIDIA's opaque configs strictly, `mps` holds the MPS
sharing rules; `checkpoint` is the versioned record of prepared claims (pure)
and `checkpoint_store` keeps it on disk.
"""
