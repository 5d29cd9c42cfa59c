"""The torchmetrics faces reduce exactly across processes: two CPU processes on gloo, each
updating on its own shard, compute the one-process value on all the data
(``_gloo_worker.py`` runs them with ``torch.multiprocessing.spawn``).

The probabilities are multiples of 2⁻¹⁰, so every bin sum is exact in float64 whatever the
order of summation: the binned errors (ECE, RMS-CE, MCE, AdaECE exact and sketch, classwise
ECE) must then be bit-identical to the one-process value. Brier and NLL are sums of per-batch
means times batch sizes, equal up to float64 rounding.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import selfcal.metrics as M
from selfcal import Predictions
from selfcal.metrics.binning import top_label_bins

pytest.importorskip("torchmetrics")
from selfcal.integrations.torchmetrics import AdaECE

WORKER = Path(__file__).with_name("_gloo_worker.py")
TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dyadic_data(n: int = 1000, c: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of counts out of 1024 (probabilities exact in float64), labels that follow them."""
    rng = np.random.default_rng(seed)
    counts = np.stack([rng.multinomial(1024, rng.dirichlet(np.full(c, 0.4))) for _ in range(n)])
    probs = counts / 1024
    labels = np.array(
        [rng.choice(c, p=row) if rng.uniform() < 0.7 else rng.integers(c) for row in probs]
    )
    return probs, labels


def run_two_processes(tmp_path: Path, probs: np.ndarray, labels: np.ndarray, split: int) -> list:
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("this torch build has no gloo backend")
    data = tmp_path / "data.npz"
    np.savez(data, probs=probs, labels=labels, split=split)
    command = [sys.executable, str(WORKER), str(data), str(tmp_path), str(free_port())]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the spawned ranks are in its session
        process.communicate()
        pytest.fail(f"the two gloo processes did not finish within {TIMEOUT_S} s")
    results = []
    for rank in range(2):
        path = tmp_path / f"rank{rank}.json"
        if not path.exists():
            pytest.fail(f"rank {rank} wrote no result:\n{output.decode(errors='replace')}")
        results.append(json.loads(path.read_text()))
    errors = [r["init_error"] for r in results if "init_error" in r]
    if errors:
        pytest.skip(f"gloo could not start on 127.0.0.1: {errors[0]}")
    assert process.returncode == 0, output.decode(errors="replace")
    return results


def test_two_gloo_processes_give_the_one_process_values(tmp_path):
    probs, labels = dyadic_data()
    split = 613  # uneven shards, several batches each
    ranks = run_two_processes(tmp_path, probs, labels, split)

    expected = {
        "ece": M.ece(probs=probs, labels=labels),
        "rmsce": M.ece(probs=probs, labels=labels, norm="l2"),
        "mce": M.mce(probs=probs, labels=labels),
        "adaece": M.adaece(probs=probs, labels=labels),
        "classwise_ece": M.classwise_ece(probs=probs, labels=labels),
        "adaece_rank0": M.adaece(probs=probs[:split], labels=labels[:split]),
        "ece_rank0": M.ece(probs=probs[:split], labels=labels[:split]),
    }
    one_process_sketch = AdaECE(15, mode="sketch")
    one_process_sketch.update(probs=torch.from_numpy(probs), labels=torch.from_numpy(labels))
    expected["adaece_sketch"] = float(one_process_sketch.compute())
    counts = top_label_bins(Predictions.from_probs(probs, labels), 15).count.tolist()
    for rank, result in enumerate(ranks):
        for name, value in expected.items():
            assert result[name] == value, (rank, name)  # bit-identical
        assert result["brier"] == pytest.approx(M.brier(probs=probs, labels=labels), rel=1e-14)
        assert result["nll"] == pytest.approx(M.nll(probs=probs, labels=labels), rel=1e-14)
        assert result["sketch_bound"] == float(one_process_sketch.error_bound())
        assert abs(result["adaece_sketch"] - expected["adaece"]) <= result["sketch_bound"]
        assert result["ece_count"] == counts
    # after compute() each rank keeps accumulating its own shard (states are un-synced)
    assert sum(ranks[0]["local_ece_count"]) == split
    assert sum(ranks[1]["local_ece_count"]) == len(labels) - split
