"""Kubernetes: the API as dra-gpu sees it, whatever the store behind it.

`cluster.Cluster` is the narrow protocol every reader and writer of API
objects uses; `api_store` implements it on the kubernetes client and
`local_store` on a directory of YAML files (`access.open_cluster` picks one
from `--cluster`). Beside them live the API's own rules that several parts
need: names (`names`), quantities (`quantity`), the body shapes
(`objects`), apiserver validation (`apiserver_rules`) and YAML (`yaml_io`).
"""
