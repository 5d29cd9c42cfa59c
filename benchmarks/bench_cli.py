"""How fast the command line starts and answers: ``selfcal --version``, ``selfcal --help`` and
``selfcal evaluate`` on 5,000 rows, each in a fresh process with its compiled bytecode cached
as an install has it (:func:`cache_bytecode`), against ``python -c "import torch"`` (the
yardstick: what every command paid before the CLI imported lazily) and ``python -c pass`` (the
interpreter's own start); and ``python -c "import pydantic"``, what typer 0.29
would add to every command (see :data:`PYDANTIC`).

Every row is a fresh ``python -m selfcal.cli ...`` (what the ``selfcal`` console script runs:
``selfcal.cli.main``) with this interpreter and environment, timed from spawn to exit, output
discarded. One warm-up call per row (file caches, bytecode), then ``--repeats`` interleaved
rounds; the table gives each row's median seconds and its median ratio to ``import torch``
within a round.
``evaluate`` reads 5,000 rows x 10 classes of float32 logits from an ``.npz`` (seeded) with its
defaults (every metric, 200 bootstrap resamples, the table); its row after imports is
``evaluate`` minus ``import torch`` in the same round.

``--baseline REV`` adds the same commands run from the ``src`` folder of another revision of
this repository (exported with ``git archive`` into a temporary folder; the repository is not
touched), in the same rounds, so that before and after are compared under the same load.

    python benchmarks/bench_cli.py                  # ~1-2 min
    python benchmarks/bench_cli.py --baseline main  # and main's, in the same rounds (~3 min)
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from _timing import Rows, interleaved_times, write_report

import selfcal

RESULTS = Path(__file__).parent / "results" / "cli.md"
YARDSTICK = '`python -c "import torch"`'
PYDANTIC = '`python -c "import pydantic"`'
"""What typer 0.29 adds to every command (it imports pydantic to parse the options; the
project keeps typer below it): this row minus ``python -c pass``."""


def write_predictions(path: Path, n: int, classes: int) -> Path:
    """``n`` rows of seeded float32 logits and labels, as ``selfcal evaluate`` reads them."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    logits = 3 * rng.normal(size=(n, classes)) + 4 * np.eye(classes)[labels]
    np.savez(path, logits=logits.astype(np.float32), labels=labels)
    return path


def spawn(*args: str, src: Path | None = None) -> None:
    """Run ``python ARGS`` to completion (with ``src`` first on ``PYTHONPATH`` if given); a
    failure stops the benchmark."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"python {' '.join(args)} failed:\n{done.stderr[-2000:]}")


def cache_bytecode(folder: Path) -> None:
    """Let every spawned process write and read compiled bytecode, under ``folder``
    (``PYTHONPYCACHEPREFIX``; the repository is not touched): as an installed selfcal does, so
    that after the warm-up no row pays for compiling selfcal's sources, even where the
    environment sets ``PYTHONDONTWRITEBYTECODE`` (this machine does; before this, every
    ``evaluate`` row compiled about 50 of selfcal's modules, some 0.15 s)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)


def export_src(revision: str, into: Path) -> tuple[Path, str]:
    """``src`` of ``revision`` of this repository, written under ``into`` by ``git archive``;
    with the revision's short hash."""
    repo = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(repo)]
    short = subprocess.run(
        [*git, "rev-parse", "--short", revision], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run([*git, "archive", revision, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src", short


def commands(data: str, n: int, src: Path | None, suffix: str = "") -> Rows:
    """The selfcal rows, run from ``src`` (``None``: the installed selfcal)."""
    cli = ("-m", "selfcal.cli")
    return {
        f"`selfcal --version`{suffix}": lambda: spawn(*cli, "--version", src=src),
        f"`selfcal --help`{suffix}": lambda: spawn(*cli, "--help", src=src),
        f"`selfcal evaluate` ({n:,} rows){suffix}": lambda: spawn(*cli, "evaluate", data, src=src),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=5_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline", help="a git revision to compare with, e.g. main")
    parser.add_argument("--note", default="", help="a sentence on the conditions, appended")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cache_bytecode(Path(tmp) / "pycache")
        data = str(write_predictions(Path(tmp) / "predictions.npz", args.n, args.classes))
        rows: Rows = {
            "`python -c pass`": lambda: spawn("-c", "pass"),
            YARDSTICK: lambda: spawn("-c", "import torch"),
            **commands(data, args.n, None),
        }
        if importlib.util.find_spec("pydantic") is not None:
            rows[PYDANTIC] = lambda: spawn("-c", "import pydantic")
        baseline = []
        if args.baseline is not None:
            src, short = export_src(args.baseline, Path(tmp) / "baseline")
            rows |= commands(data, args.n, src, " (baseline)")
            baseline = [
                f"Baseline: the same commands from revision `{args.baseline}` ({short}), "
                "in the same rounds.",
                "",
            ]
        times = interleaved_times(rows, args.repeats)

    from importlib.metadata import version

    import torch  # only for the versions line, after every timing

    lines = [
        "# Command-line start-up",
        "",
        f"`python benchmarks/bench_cli.py --repeats {args.repeats} --n {args.n}"
        f"{'' if args.baseline is None else f' --baseline {args.baseline}'}`: selfcal "
        f"{selfcal.__version__}, torch {torch.__version__}, typer {version('typer')}, Python "
        f"{platform.python_version()}, "
        f"{platform.machine()}, {torch.get_num_threads()} torch threads. Each row is a fresh "
        f"process; median of {args.repeats} interleaved rounds after a warm-up, and the median "
        f"within-round ratio to {YARDSTICK}.{' ' + args.note if args.note else ''}",
        "",
        *baseline,
        f"| command | seconds | / {YARDSTICK} |",
        "|---|---|---|",
    ]
    yardstick = times[YARDSTICK]
    for name, seconds in [*times.items(), *after_imports(times, args.n).items()]:
        ratios = [s / t for s, t in zip(seconds, yardstick, strict=True)]
        lines.append(
            f"| {name} | {statistics.median(seconds):.2f} | {statistics.median(ratios):.2f} |"
        )
    write_report("\n".join(lines) + "\n", args.out)


def after_imports(times: dict[str, list[float]], n: int) -> dict[str, list[float]]:
    """Each ``evaluate`` row minus ``import torch`` in the same round: its work after the
    imports that every command needing torch pays."""
    out = {}
    for suffix in ("", " (baseline)"):
        evaluate = times.get(f"`selfcal evaluate` ({n:,} rows){suffix}")
        if evaluate is not None:
            name = f"`selfcal evaluate` after imports (minus {YARDSTICK}){suffix}"
            out[name] = [e - t for e, t in zip(evaluate, times[YARDSTICK], strict=True)]
    return out


if __name__ == "__main__":
    main()
