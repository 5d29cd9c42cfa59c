"""A run's device is part of its key where it is not the CPU: a store resumed on a machine
with a GPU never mixes a CPU result and a GPU result of one run."""

from __future__ import annotations

import pytest
import torch

from selfcal.experiments.study import get_study, study_names

IMAGE_STUDIES = ("benchmark", "bsce-gra", "meta-reg", "bo4sc-images")


@pytest.mark.parametrize("name", study_names())
def test_cpu_runs_keep_the_keys_they_had(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    study = get_study(name)
    specs = study.specs(study.protocol("quick"))
    assert specs and all("device" not in s.hparams for s in specs)


@pytest.mark.parametrize("name", IMAGE_STUDIES)
def test_a_cifar_run_on_a_gpu_has_its_own_key(monkeypatch, name):
    study = get_study(name)
    protocol = study.protocol("quick")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = study.spec(protocol, "cifar10", "ce", 0)
    assert gpu.hparams["device"] == "cuda"
    assert "device" not in study.spec(protocol, "blobs-1.7", "ce", 0).hparams  # CPU datasets
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = study.spec(protocol, "cifar10", "ce", 0)
    assert "device" not in cpu.hparams
    assert cpu.key != gpu.key
