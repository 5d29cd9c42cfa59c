"""Two CPU processes on torch.distributed's gloo backend, each updating the metrics of
:mod:`selfcal.integrations.torchmetrics` on its own shard (run by ``test_distributed.py``).

``python _gloo_worker.py DATA.npz OUT_DIR PORT``: ``DATA.npz`` holds ``probs``, ``labels`` and
``split`` (rank 0 takes the rows before it, rank 1 the rest); each rank feeds its shard in
batches, calls ``compute()`` (which synchronises) and writes ``rank{r}.json`` with every value,
the AdaECE sketch's bound, and the synchronised bin counts. A rank that cannot start gloo
writes ``{"init_error": ...}`` instead.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
BATCH = 97


def metrics(n_classes: int) -> dict:
    from selfcal.integrations.torchmetrics import ECE, MCE, NLL, AdaECE, Brier, ClasswiseECE

    return {
        "ece": ECE(15),
        "rmsce": ECE(15, norm="l2"),
        "mce": MCE(15),
        "adaece": AdaECE(15),
        "adaece_sketch": AdaECE(15, mode="sketch"),
        "classwise_ece": ClasswiseECE(n_classes, 15),
        "brier": Brier(),
        "nll": NLL(),
        # fed by rank 0 only: rank 1 contributes empty states
        "adaece_rank0": AdaECE(15),
        "ece_rank0": ECE(15),
    }


def run(rank: int, data_path: str, out_dir: str, port: int) -> None:
    torch.set_num_threads(1)
    out = Path(out_dir) / f"rank{rank}.json"
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=WORLD,
            timeout=timedelta(seconds=30),
        )
    except Exception as error:  # reported to the test, which skips with the reason
        out.write_text(json.dumps({"init_error": f"{type(error).__name__}: {error}"}))
        return
    data = np.load(data_path)
    probs, labels, split = data["probs"], data["labels"], int(data["split"])
    rows = np.arange(split) if rank == 0 else np.arange(split, len(labels))
    found = metrics(probs.shape[1])
    for start in range(0, len(rows), BATCH):
        part = rows[start : start + BATCH]
        p, y = torch.from_numpy(probs[part]), torch.from_numpy(labels[part])
        for name, metric in found.items():
            if rank == 0 or not name.endswith("_rank0"):
                metric.update(probs=p, labels=y)
    result: dict = {name: float(metric.compute()) for name, metric in found.items()}
    result["sketch_bound"] = float(found["adaece_sketch"].error_bound())
    with found["ece"].sync_context():
        result["ece_count"] = found["ece"].count.tolist()
    result["local_ece_count"] = found["ece"].count.tolist()
    dist.barrier()
    dist.destroy_process_group()
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    data_path, out_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mp.spawn(run, args=(data_path, out_dir, port), nprocs=WORLD, join=True)
