"""The node side of dra-gpu: the kubelet plugin.

The kubelet talks to a DRA driver over gRPC on Unix sockets: it discovers the
driver through a registration socket and asks it to prepare and unprepare
ResourceClaims. This package holds that boundary: the .proto-generated stubs
(`gen`), the gRPC servers (`server`, `registration`) and the narrow, gRPC-free
interface the driver implements (`service`).
"""
