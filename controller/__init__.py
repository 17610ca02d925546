"""Publishing what a node has: ResourceSlice building, API limit checks, the publisher.

`slices` turns devices into resource.k8s.io/v1 ResourceSlice objects (pure),
`limits` checks them against every apiserver limit before anything is sent,
and the publisher keeps the cluster in step with them.
"""
