"""What a container gets: the CDI spec of a claim and the driver files it mounts.

`cdi` builds the spec (pure), `cdi_store` writes it atomically into the CDI
directory; `driver_files` decides which files of the host's NVIDIA driver a
container needs (pure, after nvcdi's rules), `driver_root` finds them on a
driver root (I/O).
"""
