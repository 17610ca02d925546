"""The ComputeDomain kubelet plugin (`dra-gpu compute-domain-kubelet-plugin`).

The node side of the second driver, `compute-domain.nvidia.com`: it publishes
the node's IMEX channel (`dra_driver.compute_domain.devices`), and prepares
channel claims by making the node a member of the claim's ComputeDomain and
waiting until the node's IMEX host reports the member Ready
(`dra_driver.compute_domain.membership`). It runs on the GPU driver's
machinery (gRPC server, registration, probe, Events, slice publisher,
checkpoint, CDI store and builders, claim parsing), shared rather than copied;
only what is particular to ComputeDomains lives here.
"""
