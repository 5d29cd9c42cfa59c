"""The meta-regularization study: quick reproduction end to end, and its meta-validation split."""

from __future__ import annotations

import json

import torch

from selfcal.cli import main
from selfcal.experiments import meta_reg as study


def test_quick_reproduction(tmp_path, capsys):
    args = ["reproduce", "meta-reg", "--quick", "--json", "--workers", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "rep")]
    assert main(args) == 0
    payload = json.loads(capsys.readouterr().out)
    q = study.QUICK
    assert len(payload["runs"]) == len(q.datasets) * len(q.methods) * len(q.seeds)
    runs = {r["method"]: r["metrics"] for r in payload["runs"]}
    for metrics in runs.values():
        for key in ("error", "ece", "mce", "adaece", "classwise_ece", "ece_1000_bins"):
            assert 0 <= metrics[key] <= 1
    assert "ece_ts" in runs["ce"] and "ece_ts" not in runs["flg-sece"]
    assert runs["ce"]["error_ts"] == runs["ce"]["error"]  # TS never changes the argmax
    # same seed, data and schedule: equal scores would mean mixing / the CE objective was lost
    assert runs["mixup-1"]["nll"] != runs["ce"]["nll"]
    assert runs["flg"]["nll"] != runs["flg-sece"]["nll"]
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "selfcal reproduce meta-reg --quick" in text and "Not run" not in text
    table1 = text.split("## digits-images", 1)[1].split("## ", 1)[0]
    gain = text.split("## SECE gain", 1)[1].split("## ", 1)[0]
    for label in ("| Mixup α=1 | ", "| FLγ | ", "| FLγ-SECE | "):
        assert label in table1
    assert "| FLγ | " in gain and "| FLγ-SECE | " in gain and "Mixup" not in gain
    assert "our reading" in text  # the FLγ meta-objective is documented as ours
    for name in ("fig3_ece_and_gamma_per_epoch", "fig4_reliability_bins", "fig5_ece_mce_vs_bins"):
        assert (tmp_path / "rep" / f"{name}_digits-images.png").stat().st_size > 5_000


def test_meta_validation_is_a_stratified_ninth_of_train_and_disjoint():
    from selfcal.data import load_dataset

    data = load_dataset("digits-images", 0)
    (x, y), (xm, ym) = study.meta_split(data, 0)
    assert len(ym) == round(len(data.train.y) / 9) and len(y) + len(ym) == len(data.train.y)
    both = torch.cat([x, xm]).reshape(len(data.train.y), -1)
    assert torch.unique(both, dim=0).shape[0] == torch.unique(
        data.train.x.reshape(len(data.train.y), -1), dim=0).shape[0]
    assert set(ym.tolist()) == set(data.train.y.tolist())  # every class represented
