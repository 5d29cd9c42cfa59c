"""Benchmark: the fit time of every registered calibrator, beside its peers, and what it buys.

Four data sets: the bundled digits validation logits (718 x 10, float32; ``selfcal.examples``)
and overconfident synthetic logits of 10^3 x 2 (where Platt scaling applies, and netcal's
``BetaCalibration`` is the same model as ours), 10^3 x 10 and 10^4 x 100 (float64; Gaussian
noise times 3 plus a margin of 6 on a class that is the label 70% of the time). On each, every
calibrator of the registry is fitted through its public ``fit`` (input validation included),
in interleaved rounds with its peers where one exists:

* netcal 1.4 ``TemperatureScaling`` (on probabilities, ``method="mle"``) beside ``ts``;
* netcal ``BBQ`` beside ``bbq`` (a different model: equal-width bins, BIC, elbow pruning);
* ``betacal.BetaCalibration("abm")``, one fit per class (one-vs-rest, as ours), beside
  ``beta``; netcal's multi-class ``BetaCalibration`` is another model (one multinomial
  regression on every class's ``log p`` and ``log(1 - p)``), timed beside it too up to
  ``C = 10`` (at 10^4 x 100 one fit took 310 s on this machine);
* on digits only, the solvers selfcal used before its penalties and Newton, as they were: vector
  scaling and unregularised matrix scaling by scipy's L-BFGS-B on autograd gradients
  (``maxiter=10000, gtol=1e-10, ftol=1e-15``); the old matrix scaling does not finish (no
  minimum), so it is stopped after ``--old-matrix-cap`` seconds and reported as ">".

Medians of ``--repeats`` interleaved rounds (``benchmarks/_timing.py``) after one warm-up
call; ratios are row median / selfcal row median. A peer slower than ``--slow`` seconds in
its warm-up call is timed once only. A table at torch's default thread count times the old
and the new vector and matrix scaling once each, as a user meets them. Another gives the
held-out quality on the digits test logits (NLL, 15-bin ECE) of every calibrator fitted on
the validation logits; a third the held-out NLL of vector and matrix scaling and Dirichlet
calibration over a grid of penalty multipliers ``lambda`` (every ``*_l2``; how much the default
of 1 matters -- it is probmetrics' default, not chosen on these test logits, see
``selfcal.posthoc._structured_scaling.RIDGE_L2``); a fourth the held-out NLL of every calibrator
fitted on
the first 100, 200, 400 and all 718 validation rows (how many rows each needs).

Run: ``python benchmarks/bench_calibrators.py [--repeats 5] [--threads 1] [--skip-large]``;
writes ``benchmarks/results/calibrators.md``.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from _timing import interleaved_times, write_report

import selfcal.metrics as M
from selfcal.examples import example_path
from selfcal.exceptions import CalibrationNotConverged
from selfcal.posthoc import CALIBRATORS, build_calibrator, calibrator_names

RESULTS = Path(__file__).parent / "results" / "calibrators.md"
Data = tuple[np.ndarray, np.ndarray]


def synthetic(seed: int, n: int, c: int) -> Data:
    """Overconfident logits: ``3 N(0, 1)`` noise plus a margin of 6 on a class that is the
    label 70% of the time (``tests/helpers/posthoc.py``'s generator)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    target = np.where(rng.random(n) < 0.7, y, rng.integers(0, c, n))
    z = 3.0 * rng.normal(size=(n, c))
    z[np.arange(n), target] += 6.0
    return z, y


def digits(split: str) -> Data:
    data = np.load(example_path(f"digits_{split}"))
    return data["logits"], data["labels"]


def softmax(z: np.ndarray) -> np.ndarray:
    return torch.softmax(torch.as_tensor(z, dtype=torch.float64), 1).numpy()


# ------------------------------------------------------------------ the solvers before
class Stop(Exception):
    """Raised by the old matrix scaling's callback at the time cap."""


def old_lbfgs(
    loss_fn: Callable[[torch.Tensor], torch.Tensor], theta0: np.ndarray, cap: float
) -> tuple[np.ndarray, str]:
    """selfcal's previous ``linear._minimise``: scipy L-BFGS-B on autograd gradients, with a
    wall-clock cap added (a callback that raises). Returns the parameters and scipy's
    message."""
    from scipy.optimize import minimize

    def value_and_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        loss = loss_fn(t)
        (grad,) = torch.autograd.grad(loss, t)
        return float(loss.detach()), grad.numpy()

    start = time.perf_counter()

    def stop_at_cap(_: np.ndarray) -> None:
        if time.perf_counter() - start > cap:
            raise Stop

    res = minimize(
        value_and_grad,
        theta0,
        jac=True,
        method="L-BFGS-B",
        callback=stop_at_cap,
        options={"maxiter": 10_000, "gtol": 1e-10, "ftol": 1e-15},
    )
    return res.x, f"{res.nit} iterations, {res.message}"


def old_vector(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    zt, yt = torch.as_tensor(z, dtype=torch.float64), torch.as_tensor(y)
    c = z.shape[1]
    theta, _ = old_lbfgs(
        lambda t: torch.nn.functional.cross_entropy(zt * t[:c] + t[c:], yt),
        np.r_[np.ones(c), np.zeros(c)],
        math.inf,
    )
    return theta


def old_matrix(z: np.ndarray, y: np.ndarray, cap: float) -> tuple[float, str]:
    """Seconds until the old unregularised matrix scaling stopped (``inf`` if the cap stopped
    it) and how it stopped."""
    zt, yt = torch.as_tensor(z, dtype=torch.float64), torch.as_tensor(y)
    c = z.shape[1]

    def loss(t: torch.Tensor) -> torch.Tensor:
        w, b = t[: c * c].reshape(c, c), t[c * c :]
        return torch.nn.functional.cross_entropy(zt @ w.T + b, yt)

    start = time.perf_counter()
    try:
        _, message = old_lbfgs(loss, np.r_[np.eye(c).ravel(), np.zeros(c)], cap)
    except Stop:
        return math.inf, "stopped at the cap"
    return time.perf_counter() - start, message


class LogitsClassifier:
    """A fitted scikit-learn classifier whose decision function is its input: the logits
    (one column ``z_1 - z_0`` for two classes, as scikit-learn reads binary scores)."""

    _estimator_type = "classifier"

    def fit(self, z: np.ndarray, y: np.ndarray) -> LogitsClassifier:
        self.classes_ = np.arange(z.shape[1])
        return self

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        return x

    def predict(self, x: np.ndarray) -> np.ndarray:
        return (x > 0).astype(int) if x.ndim == 1 else x.argmax(1)

    def get_params(self, deep: bool = True) -> dict[str, object]:
        return {}

    def __sklearn_tags__(self) -> object:
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(),
        )


# ------------------------------------------------------------------ rows
def peers(name: str, z: np.ndarray, y: np.ndarray) -> dict[str, Callable[[], object]]:
    """Peer fits of the calibrator ``name`` on ``(z, y)`` (probabilities where they take
    them, computed outside the timed call)."""
    out: dict[str, Callable[[], object]] = {}
    p = softmax(z)
    c = z.shape[1]
    if name == "ts":
        from netcal.scaling import TemperatureScaling

        out["netcal TemperatureScaling"] = lambda: TemperatureScaling().fit(p, y)
    probmetrics = {"ts": "temp-scaling", "ts-mix": "ts-mix", "svs": "svs", "sms": "sms"}
    if c == 2:
        probmetrics["quadratic"] = "quadratic-scaling"
    if name in probmetrics:
        from probmetrics.calibrators import get_calibrator

        key = probmetrics[name]
        out[f"probmetrics `{key}`"] = lambda: get_calibrator(key).fit(p, y)
    if name == "ts":
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.frozen import FrozenEstimator

        scores = z[:, 1] - z[:, 0] if c == 2 else z
        frozen = FrozenEstimator(LogitsClassifier().fit(z, y))
        out["scikit-learn CalibratedClassifierCV(method='temperature')"] = lambda: (
            CalibratedClassifierCV(frozen, method="temperature").fit(scores, y)
        )
    if name == "bbq":
        from netcal.binning import BBQ

        out["netcal BBQ (equal-width, BIC)"] = lambda: BBQ().fit(p, y)
    if name == "beta":
        from betacal import BetaCalibration as BetaCal
        from netcal.scaling import BetaCalibration

        classes = [1] if c == 2 else range(c)
        out["betacal abm, one-vs-rest"] = lambda: [
            BetaCal("abm").fit(p[:, j], (y == j).astype(int)) for j in classes
        ]
        joint = "netcal BetaCalibration" + (" (joint model)" if c > 2 else "")
        if c <= 10:  # at 10^4 x 100 one fit took 310 s here: left out
            out[joint] = lambda: BetaCalibration().fit(p, y)
    return out


def quiet(fn: Callable[[], object]) -> Callable[[], object]:
    def call() -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()

    return call


def timing_table(
    label: str, data: Data, repeats: int, slow: float, old_cap: float | None
) -> list[str]:
    z, y = data
    lines = [
        f"### {label}: {z.shape[0]:,} x {z.shape[1]} {z.dtype} logits",
        "",
        "| calibrator | median ms | min ms | row / selfcal | note |",
        "|---|---:|---:|---:|---|",
    ]
    for name in calibrator_names():
        if name in ("platt", "quadratic") and z.shape[1] != 2:
            continue
        ours = f"selfcal `{name}`"
        rows = {ours: quiet(lambda name=name: build_calibrator(name).fit(logits=z, labels=y))}
        rows.update({k: quiet(v) for k, v in peers(name, z, y).items()})
        if old_cap is not None and name == "vector":
            rows["selfcal before (L-BFGS-B, autograd)"] = lambda: old_vector(z, y)
        once: dict[str, float] = {}
        for key in list(rows):
            start = time.perf_counter()
            rows[key]()
            if key != ours and time.perf_counter() - start > slow:
                once[key] = time.perf_counter() - start
                del rows[key]
        times = interleaved_times(rows, repeats)
        times.update({k: [v] for k, v in once.items()})
        base = statistics.median(times[ours])
        for key, t in times.items():
            note = "timed once (slow)" if key in once else ""
            if key == ours:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    build_calibrator(name).fit(logits=z, labels=y)
                if any(issubclass(w.category, CalibrationNotConverged) for w in caught):
                    note = "warned: not converged"
            lines.append(
                f"| {key} | {1e3 * statistics.median(t):.1f} | {1e3 * min(t):.1f} | "
                f"{statistics.median(t) / base:.2f}x | {note} |"
            )
        if old_cap is not None and name == "matrix":
            seconds, how = old_matrix(z, y, old_cap)
            shown = f"> {1e3 * old_cap:.0f}" if math.isinf(seconds) else f"{1e3 * seconds:.1f}"
            ratio = "" if math.isinf(seconds) else f"{seconds / base:.2f}x"
            lines.append(
                f"| selfcal before (unregularised, L-BFGS-B) | {shown} | | {ratio} | timed "
                f"once; {how} (no minimum) |"
            )
    return lines


def quality_table() -> list[str]:
    (z, y), (zt, yt) = digits("val"), digits("test")
    lines = [
        "### Held-out quality: fitted on the digits validation logits, scored on the "
        f"{len(yt):,} test logits",
        "",
        "| calibrator | test NLL | test ECE (15 bins) | test accuracy |",
        "|---|---:|---:|---:|",
        f"| (none) | {M.nll(logits=zt, labels=yt):.4f} | {M.ece(logits=zt, labels=yt):.4f} | "
        f"{M.accuracy(logits=zt, labels=yt):.4f} |",
    ]
    fitted: dict[str, np.ndarray] = {}
    for name in calibrator_names():
        if name in ("platt", "quadratic"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal = build_calibrator(name).fit(logits=z, labels=y)
            fitted[f"selfcal `{name}`"] = cal.predict_proba(logits=zt)
        cal = build_calibrator("beta", smooth_targets=False).fit(logits=z, labels=y)
        fitted["selfcal `beta`, smooth_targets=False (betacal's 0/1 targets)"] = cal.predict_proba(
            logits=zt
        )
    from betacal import BetaCalibration as BetaCal
    from netcal.binning import BBQ
    from netcal.scaling import BetaCalibration, TemperatureScaling

    p, pt = softmax(z), softmax(zt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted["netcal TemperatureScaling"] = TemperatureScaling().fit(p, y).transform(pt)
        fitted["netcal BBQ"] = BBQ().fit(p, y).transform(pt)
        fitted["netcal BetaCalibration (joint)"] = BetaCalibration().fit(p, y).transform(pt)
        cols = [
            BetaCal("abm").fit(p[:, j], (y == j).astype(int)).predict(pt[:, j]) for j in range(10)
        ]
    ovr = np.stack(cols, 1)
    fitted["betacal abm, one-vs-rest, renormalised"] = ovr / ovr.sum(1, keepdims=True)
    for key, q in fitted.items():
        q = np.clip(q, 0, 1)
        q = q / q.sum(1, keepdims=True)
        lines.append(
            f"| {key} | {M.nll(probs=q, labels=yt):.4f} | {M.ece(probs=q, labels=yt):.4f} | "
            f"{M.accuracy(probs=q, labels=yt):.4f} |"
        )
    return lines


def penalty_table() -> list[str]:
    (z, y), (zt, yt) = digits("val"), digits("test")
    grid = [0.0, 0.1, 0.3, 1.0, 3.0, 10.0]
    lines = [
        "### Penalty strength: held-out NLL on the digits test logits, every `*_l2 = lambda`",
        "",
        "| calibrator | " + " | ".join(f"{g:g}" for g in grid) + " |",
        "|---|" + "---:|" * len(grid),
    ]
    for name in ("vector", "matrix", "dirichlet"):
        cells = []
        for g in grid:
            strengths = {"diagonal_l2": g, "bias_l2": g}
            if name != "vector":
                strengths["off_diagonal_l2"] = g
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cal = build_calibrator(name, **strengths).fit(logits=z, labels=y)
            cells.append(f"{M.nll(probs=cal.predict_proba(logits=zt), labels=yt):.4f}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    ts = build_calibrator("ts").fit(logits=z, labels=y).predict_proba(logits=zt)
    lines += ["", f"For comparison: `ts` {M.nll(probs=ts, labels=yt):.4f}."]
    return lines


VALIDATION_SIZES = (100, 200, 400, None)
"""Validation rows of the validation-size table (``None``: all of them)."""


def validation_size_table() -> list[str]:
    """Held-out NLL of every calibrator fitted on the first rows of the digits validation
    logits: how many rows each needs."""
    (z, y), (zt, yt) = digits("val"), digits("test")
    sizes = [n or len(y) for n in VALIDATION_SIZES]
    lines = [
        "### Validation size: held-out NLL on the digits test logits, fitted on the first "
        "n validation rows",
        "",
        "| calibrator | " + " | ".join(f"n = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
        "| (none) | " + " | ".join(f"{M.nll(logits=zt, labels=yt):.4f}" for _ in sizes) + " |",
    ]
    for name in calibrator_names():
        if name in ("platt", "quadratic"):
            continue
        cells = []
        for n in sizes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cal = build_calibrator(name).fit(logits=z[:n], labels=y[:n])
            cells.append(f"{M.nll(probs=cal.predict_proba(logits=zt), labels=yt):.4f}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def default_threads_table(threads: int, cap: float) -> list[str]:
    """Vector and matrix scaling on the digits validation logits, before and now, at torch's
    default thread count -- how a user meets them (and how the fits were first reported
    slow): small multi-threaded kernels make the old solvers' thousands of autograd calls far
    slower than at one thread. Each fit timed once, after a warm-up of the new ones."""
    z, y = digits("val")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        now = {}
        for name in ("vector", "matrix"):
            build_calibrator(name).fit(logits=z, labels=y)
            start = time.perf_counter()
            build_calibrator(name).fit(logits=z, labels=y)
            now[name] = time.perf_counter() - start
        start = time.perf_counter()
        old_vector(z, y)
        old_vector_s = time.perf_counter() - start
        old_matrix_s, how = old_matrix(z, y, cap)
    finally:
        torch.set_num_threads(previous)
    shown = f"> {cap:.0f}" if math.isinf(old_matrix_s) else f"{old_matrix_s:.2f}"
    return [
        f"### At torch's default thread count ({threads}): digits validation, each fit timed once",
        "",
        "| calibrator | before, s | now, ms |",
        "|---|---:|---:|",
        f"| `vector` | {old_vector_s:.2f} | {1e3 * now['vector']:.1f} |",
        f"| `matrix` | {shown} ({how}) | {1e3 * now['matrix']:.1f} |",
    ]


def run(args: argparse.Namespace, command: str) -> str:
    sets: list[tuple[str, Data, float | None]] = [
        ("digits validation", digits("val"), args.old_matrix_cap),
        ("synthetic, binary", synthetic(2, 1_000, 2), None),
        ("synthetic", synthetic(0, 1_000, 10), None),
    ]
    if not args.skip_large:
        sets.append(("synthetic", synthetic(1, 10_000, 100), None))
    lines = [
        "# Calibrator fit times",
        "",
        f"Fit of every registered calibrator ({len(CALIBRATORS)}) through its public `fit` "
        f"(input validation included), peers in the same interleaved rounds; median and "
        f"minimum of {args.repeats} rounds after a warm-up call; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {platform.processor() or platform.machine()}. "
        "`row / selfcal` = the row's median over the selfcal calibrator's median.",
        f"Command: `{command}`",
        "",
    ]
    for label, data, cap in sets:
        lines += timing_table(label, data, args.repeats, args.slow, cap) + [""]
    lines += default_threads_table(args.default_threads, args.old_matrix_cap) + [""]
    lines += quality_table() + [""] + penalty_table() + [""] + validation_size_table()
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on a shared machine multi-threaded kernels "
        "stall unpredictably on inputs this small)",
    )
    parser.add_argument("--skip-large", action="store_true", help="leave out 10^4 x 100")
    parser.add_argument("--slow", type=float, default=20.0, help="time a slower peer once")
    parser.add_argument(
        "--old-matrix-cap", type=float, default=120.0, help="seconds before stopping the old MS"
    )
    args = parser.parse_args()
    args.default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    command = (
        f"python benchmarks/bench_calibrators.py --repeats {args.repeats} --threads "
        f"{args.threads}" + (" --skip-large" if args.skip_large else "")
    )
    write_report(run(args, command), RESULTS)


if __name__ == "__main__":
    main()
