"""training_env: the EFA and Neuron environment every backend's jobs share."""

from __future__ import annotations

import pytest

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, EFA_TRAINING_TYPES, SUPPORTED_TRAINING_TYPES
from trainium_cdk.facts.versions import NATIVE_TRACK, NEURON_TRACKS, XLA_TRACK
from trainium_cdk.runtime.jobs import JobSpec
from trainium_cdk.runtime.training_env import LARGE_MODEL_ENVIRONMENT, cache_dir, efa_environment, neuron_environment

EFA_KEYS = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}


@pytest.mark.parametrize("instance_type", EFA_TRAINING_TYPES)
def test_efa_types_get_the_libfabric_efa_settings(instance_type):
    assert efa_environment(DEFAULT_CATALOG.get(instance_type)) == EFA_KEYS


@pytest.mark.parametrize("instance_type", sorted(set(DEFAULT_CATALOG.names()) - set(EFA_TRAINING_TYPES)))
def test_types_without_efa_must_not_ask_for_the_efa_provider(instance_type):
    assert efa_environment(DEFAULT_CATALOG.get(instance_type)) == {}


def test_every_supported_type_is_covered():
    assert "trn1.2xlarge" in SUPPORTED_TRAINING_TYPES and "trn1.2xlarge" not in EFA_TRAINING_TYPES


def test_neuron_environment_runtime_settings():
    assert neuron_environment() == {"NEURON_RT_RESET_CORES": "1", "XLA_TRANSFER_SEED_ASYNC": "1"}


def test_one_compile_cache_layout_on_shared_storage_and_on_the_node():
    assert cache_dir("train") == "/fsx/neuron-cache/train"
    assert cache_dir("train", shared=False) == "/var/tmp/neuron-compile-cache/train"
    assert cache_dir("a") != cache_dir("b")


def test_returned_maps_are_copies():
    spec = DEFAULT_CATALOG.get("trn1.32xlarge")
    first = efa_environment(spec)
    first["FI_PROVIDER"] = "tcp"
    neuron = neuron_environment()
    neuron["NEURON_RT_RESET_CORES"] = "0"
    assert efa_environment(spec)["FI_PROVIDER"] == "efa"
    assert neuron_environment()["NEURON_RT_RESET_CORES"] == "1"


def test_every_track_has_its_large_model_settings_and_a_job_s_own_env_wins():
    assert set(LARGE_MODEL_ENVIRONMENT) == set(NEURON_TRACKS)
    spec = DEFAULT_CATALOG.get("trn1.32xlarge")
    job = JobSpec(name="llama", instance=spec, command=["train.py"], image="i", neuron_track=XLA_TRACK,
                  env={"MALLOC_ARENA_MAX": "128", "NEURON_CC_FLAGS": "-O1"})
    env = job.environment()
    assert env["MALLOC_ARENA_MAX"] == "128" and env["NEURON_CC_FLAGS"] == "-O1"
    assert env["NEURON_FUSE_SOFTMAX"] == "1"
    # The native track's own docs give none of the XLA track's (torch-xla) settings.
    native = JobSpec(name="llama", instance=DEFAULT_CATALOG.get("trn2.48xlarge"), command=["train.py"], image="i",
                     neuron_track=NATIVE_TRACK).environment()
    assert not set(LARGE_MODEL_ENVIRONMENT["xla"]) & set(native)
    # A job of no track (the fabric check) trains nothing: none either.
    assert "MALLOC_ARENA_MAX" not in JobSpec(name="fabric", instance=spec, command=["x"], image="i").environment()


def test_a_job_s_precompile_step_cap_is_a_positive_whole_number():
    spec = DEFAULT_CATALOG.get("trn1.32xlarge")
    assert JobSpec(name="a", instance=spec, command=["t.py"], image="i", precompile_steps=3).environment()[
        "TRN_PRECOMPILE_STEPS"] == "3"
    for bad in (0, -1, True, "3"):
        with pytest.raises(ConfigError, match="precompile_steps"):
            JobSpec(name="a", instance=spec, command=["t.py"], image="i", precompile_steps=bad)
