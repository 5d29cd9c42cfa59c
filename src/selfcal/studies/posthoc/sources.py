"""Where the leaderboard's prediction sets come from: a stored benchmark record's validation
and test logits, or a scikit-learn model trained on a tabular set's training split and
predicting its validation and test splits (``predict_proba``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from selfcal.experiments.spec import RunSpec
from selfcal.io import PredictionSet
from selfcal.studies.posthoc.protocol import GENERATED, PosthocProtocol


def prediction_set(protocol: PosthocProtocol, spec: RunSpec) -> PredictionSet:
    """The set ``spec`` names: a benchmark record (``hp.record``) or a scikit-learn model."""
    record = spec.hparams.get("hp.record")
    if record is not None:
        return benchmark_set(protocol.benchmark_store, str(record))
    return sklearn_set(protocol, spec.dataset, spec.method, spec.seed)


def stored_benchmark_records(
    store_path: str, benchmark_protocol: str, regimes: tuple[str, ...], reader: str
) -> list[Any]:
    """The benchmark's selected records of ``regimes`` that stored their predictions
    (``val_logits``), sorted by key, from the store at ``store_path``; a missing store is a
    ``FileNotFoundError`` that says how to make it (``reader``: the study that needs it)."""
    from selfcal.experiments.store import ResultsStore
    from selfcal.experiments.study import StudyResults
    from selfcal.studies.benchmark import Benchmark

    if not Path(store_path).exists():
        raise FileNotFoundError(
            f"{reader} reads the benchmark's stored predictions, and {store_path} does not "
            f"exist: run `selfcal reproduce benchmark --store {store_path} --out "
            "results/benchmark` first (or `--quick` for the scikit-learn sets only)"
        )
    benchmark = Benchmark()
    with ResultsStore(store_path) as store:
        made = benchmark.protocol(benchmark_protocol)
        records = StudyResults.load(benchmark, made, store).selected
    return [
        r
        for r in sorted(records, key=lambda r: r.key)
        if "val_logits" in r.artefacts and r.spec.hparams["regime"] in regimes
    ]


def benchmark_set(store_path: str, key: str) -> PredictionSet:
    """The stored validation / test logits and labels of benchmark run ``key``."""
    from selfcal.experiments.store import ResultsStore

    if not Path(store_path).exists():
        raise FileNotFoundError(f"benchmark store {store_path} not found")
    with ResultsStore(store_path) as store:
        parts = {
            n: store.artefact(key, n)
            for n in ("val_logits", "val_labels", "test_logits", "test_labels")
        }
    return PredictionSet(
        "logits",
        parts["val_logits"].astype(np.float64),
        parts["val_labels"].astype(np.int64),
        parts["test_logits"].astype(np.float64),
        parts["test_labels"].astype(np.int64),
    )


def sklearn_set(protocol: PosthocProtocol, dataset: str, model: str, seed: int) -> PredictionSet:
    """``model`` (standardised features) fitted on ``dataset``'s training split of ``seed``;
    its ``predict_proba`` on the validation and test splits."""
    (x, y), (xv, yv), (xt, yt) = splits(protocol, dataset, seed)
    fitted = sklearn_model(model, seed).fit(x, y)
    return PredictionSet(
        "probs",
        fitted.predict_proba(xv).astype(np.float64),
        yv,
        fitted.predict_proba(xt).astype(np.float64),
        yt,
    )


def splits(
    protocol: PosthocProtocol, dataset: str, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """``((x, y) train, validation, test)`` as numpy arrays, features flattened."""
    if dataset in GENERATED:
        return generated(GENERATED[dataset], protocol.generated_rows, seed)
    from selfcal.data import load_dataset

    data = load_dataset(dataset, seed)
    return tuple(
        (s.x.reshape(len(s.x), -1).double().numpy(), s.y.numpy())
        for s in (data.train, data.val, data.test)
    )


def generated(n_classes: int, rows: int, seed: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """scikit-learn's ``make_classification``: 20 features (12 informative, 4 redundant), two
    clusters a class, 5% of labels flipped, ``rows`` rows a split."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=3 * rows,
        n_features=20,
        n_informative=12,
        n_redundant=4,
        n_classes=n_classes,
        n_clusters_per_class=2,
        flip_y=0.05,
        random_state=seed,
    )
    return tuple((x[i * rows : (i + 1) * rows], y[i * rows : (i + 1) * rows]) for i in range(3))


def sklearn_model(name: str, seed: int) -> Any:
    """Standardised features, then logistic regression, histogram gradient boosting, a
    random forest (200 trees) or an MLP (one hidden layer of 100) -- scikit-learn's defaults
    otherwise (their iteration limits included: a model stopped short is still a model to
    calibrate), seeded."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    models = {
        "logistic": lambda: LogisticRegression(),
        "gradient-boosting": lambda: HistGradientBoostingClassifier(random_state=seed),
        "random-forest": lambda: RandomForestClassifier(200, random_state=seed, n_jobs=1),
        "mlp": lambda: MLPClassifier(random_state=seed),
    }
    return make_pipeline(StandardScaler(), models[name]())
