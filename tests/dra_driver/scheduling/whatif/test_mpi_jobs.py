"""Kubeflow MPIJobs (`kubeflow.org/v2beta1`) become the worker pods, then the launcher."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.errors import ConfigError
from dra_driver.scheduling.whatif.documents import SourcedObject
from dra_driver.scheduling.whatif.inputs import collect_inputs
from dra_driver.scheduling.whatif.workloads import expand_workload


def _job(**spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    replica_specs = {
        "Launcher": {"template": template},
        "Worker": {"replicas": 3, "template": {**template, "metadata": {"labels": {"r": "w"}}}},
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl", "namespace": "ml"},
        "spec": {"mpiReplicaSpecs": replica_specs, **spec},
    }


def test_workers_are_named_as_the_operator_names_them_and_the_launcher_comes_last() -> None:
    pods = expand_workload(_job(), "job.yaml")
    assert [p.pod["metadata"]["name"] for p in pods] == [
        "nccl-worker-0",
        "nccl-worker-1",
        "nccl-worker-2",
        "nccl-launcher",
    ]
    assert {p.owner for p in pods} == {"MPIJob ml/nccl"}
    assert pods[0].pod["metadata"]["labels"] == {"r": "w"}


def test_a_suspended_job_runs_nothing_and_workers_default_to_none() -> None:
    assert expand_workload(_job(runPolicy={"suspend": True}), "job.yaml") == []
    job = _job()
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert [p.pod["metadata"]["name"] for p in expand_workload(job, "job.yaml")] == [
        "nccl-launcher"
    ]


def test_a_job_without_replica_specs_is_an_error_naming_the_file_and_field() -> None:
    job = _job()
    del job["spec"]["mpiReplicaSpecs"]
    with pytest.raises(ConfigError, match=r"job.yaml: MPIJob ml/nccl: spec.mpiReplicaSpecs"):
        expand_workload(job, "job.yaml")
    job = _job()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = -1
    with pytest.raises(
        ConfigError, match=r"MPIJob ml/nccl: spec.mpiReplicaSpecs.Worker.replicas must be"
    ):
        expand_workload(job, "job.yaml")


def test_other_mpijob_versions_are_still_ignored() -> None:
    """The operator's v1 MPIJob has another shape; it is counted as ignored, not guessed at."""
    old = {**_job(), "apiVersion": "kubeflow.org/v1"}
    inputs = collect_inputs([SourcedObject(old, "job.yaml"), SourcedObject(_job(), "job.yaml")])
    assert len(inputs.items) == 1
    assert inputs.ignored == {"MPIJob (kubeflow.org/v1)": 1}
