"""``selfcal train`` as a function: :func:`train` reads the files, trains and selects, fits
the calibrator and the abstention thresholds on validation, and writes the model folder
(:mod:`selfcal.pipeline.model_dir`) with its report."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

import selfcal
from selfcal._folders import remove_abandoned_scratch
from selfcal._validation import check_choice, check_int, check_optional_int, check_positive
from selfcal.evaluation import default_resamples
from selfcal.methods import TABULAR, Method, Recipe, get_method, resolve_batch_size
from selfcal.pipeline import model_dir as md
from selfcal.pipeline.conformal import save_calibration, split_validation
from selfcal.pipeline.fitting import (
    DEFAULT_PATIENCE,
    DEFAULT_STOP_BY,
    Progress,
    Selection,
    fit_and_select,
)
from selfcal.pipeline.guarantee import (
    DEFAULT_DELTA,
    DEFAULT_RULE,
    check_guarantee,
    stored_certificate,
)
from selfcal.pipeline.prepare import PreparedData, prepare
from selfcal.pipeline.report import (
    candidates_json,
    markdown,
    metrics_with_intervals,
    split_predictions,
)
from selfcal.pipeline.selective import (
    DEFAULT_TARGET_ACCURACY,
    DEFAULT_TARGET_COVERAGE,
    Threshold,
    choose_threshold,
)
from selfcal.pipeline.tables import FeatureTable, read_table
from selfcal.training.checkpoint import CRITERIA

DEFAULT_CALIBRATOR = "ts"
"""Temperature scaling: one parameter, keeps every predicted class (so the accuracy), and CE
followed by it is what no method of the benchmark reliably beats."""


@dataclass(frozen=True)
class TrainSettings:
    """Everything :func:`train` needs besides the data.

    ``method``: a name of :data:`selfcal.methods.catalogue.METHODS` (or an alias);
    ``grid``: candidate values replacing some of the method's (``{"gamma": (1.0, 3.0)}``);
    ``hidden`` / ``epochs`` / ``lr`` / ``batch_size``: the recipe of an MLP trained by Adam
    (:class:`~selfcal.methods.recipe.Recipe`; by default the benchmark's tabular one,
    :data:`~selfcal.methods.recipe.TABULAR`, with ``batch_size="auto"``: full batch up to
    4,096 training rows, batches of 512 above);
    ``calibrate``: a calibrator of :mod:`selfcal.posthoc` fitted on VAL, or ``None``;
    ``n_resamples``: the report's bootstrap resamples (``None``: the default for the size);
    ``seed``: the initialisation, shuffling, meta-validation split and bootstrap;
    ``stop_by``: the checkpoint kept, ``"refinement"`` (the lowest validation NLL after
    temperature scaling; Berta et al., 2025; default) or ``"nll"`` (the lowest validation
    NLL): :data:`selfcal.pipeline.fitting.STOP_BY_DOC` gives the benchmark's evidence;
    ``patience``: a candidate stops once this many epochs have passed without a better
    checkpoint (:data:`~selfcal.pipeline.fitting.DEFAULT_PATIENCE` = 50; ``None``: every
    epoch);
    ``conformal_split``: the share of VAL held out, before selection and calibration, for
    conformal prediction sets (:mod:`selfcal.pipeline.conformal`) and certified abstention,
    or ``None``; ``target_risk``, ``delta``, ``rule``: the abstention guarantee the folder keeps
    and ``selfcal predict`` applies when given no target (:mod:`selfcal.pipeline.guarantee`;
    ``target_risk`` ``None``: none)."""

    method: str
    hidden: tuple[int, ...] = TABULAR.hidden or ()
    epochs: int = TABULAR.epochs
    lr: float = TABULAR.lr
    batch_size: int | Literal["auto"] | None = "auto"
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    calibrate: str | None = DEFAULT_CALIBRATOR
    seed: int = 0
    n_resamples: int | None = None
    device: str = "cpu"
    stop_by: str = DEFAULT_STOP_BY
    patience: int | None = DEFAULT_PATIENCE
    conformal_split: float | None = None
    target_risk: float | None = None
    delta: float = DEFAULT_DELTA
    rule: str = DEFAULT_RULE

    def __post_init__(self) -> None:
        get_method(self.method)
        if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in self.hidden):
            raise ValueError(f"hidden must be positive integers, got {self.hidden!r}")
        check_int("epochs", self.epochs)
        check_positive("lr", self.lr)
        if self.batch_size != "auto":
            check_optional_int("batch_size", self.batch_size)
        check_int("seed", self.seed, minimum=0)
        check_optional_int("n_resamples", self.n_resamples)
        check_choice("stop_by", self.stop_by, CRITERIA)
        check_optional_int("patience", self.patience)
        if self.conformal_split is not None and not 0.0 < self.conformal_split < 1.0:
            raise ValueError(f"--conformal-split must be in (0, 1), got {self.conformal_split!r}")
        check_guarantee(self.target_risk, self.delta, self.rule, self.conformal_split)
        if self.calibrate is not None:
            from selfcal.posthoc.registry import build_calibrator, calibrator_name

            name = calibrator_name(self.calibrate)  # a registered name or a class's, else error
            if build_calibrator(name).uses_groups:
                raise ValueError(
                    f"--calibrator {self.calibrate}: needs each row's group, which selfcal train "
                    "does not read; fit it on the model's predictions with selfcal calibrate "
                    "--calibrator " + name
                )
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device {self.device!r} is not a valid torch device") from err
        self.resolved_method()

    def resolved_method(self) -> Method:
        """The method with the ``grid`` overrides applied."""
        return get_method(self.method).with_grid(self.grid)

    def recipe(self, n_train: int) -> Recipe:
        """The recipe for ``n_train`` training rows (``batch_size`` resolved)."""
        batch_size = resolve_batch_size(self.batch_size, n_train)
        return Recipe("mlp", self.epochs, "adam", self.lr, batch_size, hidden=tuple(self.hidden))


@dataclass(frozen=True, eq=False)
class TrainResult:
    """What :func:`train` wrote: the folder, the report (``report.json``'s document) and the
    selection with every candidate."""

    folder: Path
    report: dict[str, Any]
    selection: Selection


def train(
    data: str | Path | FeatureTable,
    val: str | Path | FeatureTable,
    out: str | Path,
    settings: TrainSettings,
    *,
    test: str | Path | FeatureTable | None = None,
    label_column: str = "label",
    overwrite: bool = False,
    progress: Progress | None = None,
    command: str = "",
) -> TrainResult:
    """Train ``settings.method`` on DATA, select on VAL, calibrate and write ``out``.

    The files are read by :func:`selfcal.pipeline.tables.read_table` (tables may also be
    given in memory); every check -- the label column, the feature columns of the three files,
    finite features, two classes or more, labels of VAL and TEST that DATA has, an ``out``
    folder that does not already hold files (unless ``overwrite``) -- runs before training.
    """
    method = settings.resolved_method()
    folder = _check_out(Path(out), overwrite)
    tables = [_table(t, label_column) for t in (data, val)]
    held_out = None
    if settings.conformal_split is not None:
        tables[1], held_out = split_validation(tables[1], settings.conformal_split, settings.seed)
    test_table = None if test is None else _table(test, label_column)
    prepared = prepare(tables[0], tables[1], test_table, seed=settings.seed)
    if held_out is not None and held_out.labels is not None:  # a class DATA lacks: stop now
        prepared.labels.encode(held_out.labels, held_out.name)
    recipe = settings.recipe(len(prepared.train[1]))
    selection = fit_and_select(
        method,
        recipe,
        prepared,
        seed=settings.seed,
        device=settings.device,
        progress=progress,
        stop_by=settings.stop_by,
        patience=settings.patience,
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_scratch(folder)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.{os.getpid()}.", dir=folder.parent))
    try:
        report = _write_folder(
            scratch,
            settings,
            method,
            recipe,
            prepared,
            selection,
            tables,
            test_table,
            label_column,
            command,
            held_out,
        )
        _replace(folder, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return TrainResult(folder, report, selection)


def _replace(folder: Path, scratch: Path) -> None:
    """Move the finished files from ``scratch`` into ``folder``, replacing a model folder's
    files there (checked by :func:`_check_out`): a run that fails leaves ``folder`` as it
    was."""
    folder.mkdir(exist_ok=True)
    for name in md.FILES:
        (folder / name).unlink(missing_ok=True)
    for path in scratch.iterdir():
        path.replace(folder / path.name)


def _table(source: str | Path | FeatureTable, label_column: str) -> FeatureTable:
    if isinstance(source, FeatureTable):
        return source
    return read_table(source, label_column=label_column, require_labels=True)


def _check_out(folder: Path, overwrite: bool) -> Path:
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        if not overwrite:
            raise ValueError(f"{folder}: the folder is not empty; pass --overwrite to replace it")
        foreign = [p.name for p in folder.iterdir() if p.name not in md.FILES]
        if foreign:
            raise ValueError(
                f"{folder}: holds files a model folder does not ({', '.join(foreign[:5])}); "
                "refusing to overwrite it"
            )
    return folder


def _config(
    settings: TrainSettings,
    method: Method,
    recipe: Recipe,
    prepared: PreparedData,
    selection: Selection,
    label_column: str,
    tables: list[FeatureTable],
    test: FeatureTable | None,
    held_out: FeatureTable | None = None,
) -> dict[str, Any]:
    best = selection.best
    return {
        "format": md.FORMAT,
        "format_version": md.FORMAT_VERSION,
        "selfcal_version": selfcal.__version__,
        "torch_version": torch.__version__,
        "architecture": {
            "name": "mlp",
            "n_features": prepared.n_features,
            "n_classes": prepared.n_classes,
            "hidden": list(settings.hidden),
            "activation": "relu",
            "dropout": 0.0,
        },
        "method": method.name,
        "hyperparameters": best.hyperparameters,
        "criterion": {"metric": selection.criterion.metric, "words": str(selection.criterion)},
        "checkpoint_epoch": best.best_epoch,
        "epochs_trained": best.epochs_trained,
        "stop_by": settings.stop_by,
        "patience": settings.patience,
        "recipe": {
            "optimizer": "adam",
            "lr": recipe.lr,
            "epochs": recipe.epochs,
            "batch_size": recipe.batch_size,
            "batch_size_option": settings.batch_size,
        },
        "seed": settings.seed,
        "features": {
            "columns": list(prepared.columns),
            "mean": [float(v) for v in prepared.standardizer.mean],
            "std": [float(v) for v in prepared.standardizer.std],
        },
        "labels": {"column": label_column, "classes": list(prepared.labels.classes)},
        "calibrator": None
        if settings.calibrate is None
        else {"name": settings.calibrate, "file": md.CALIBRATOR},
        "data": {
            "train": tables[0].name,
            "validation": tables[1].name,
            "test": None if test is None else test.name,
            "rows": prepared.sizes(),
        },
        "conformal": None
        if held_out is None
        else {
            "file": md.CONFORMAL,
            "split": settings.conformal_split,
            "rows": held_out.n_rows,
            "seed": settings.seed,
        },
        "abstention": None
        if settings.target_risk is None
        else {"target_risk": settings.target_risk, "delta": settings.delta, "rule": settings.rule},
    }


def _write_folder(
    folder: Path,
    settings: TrainSettings,
    method: Method,
    recipe: Recipe,
    prepared: PreparedData,
    selection: Selection,
    tables: list[FeatureTable],
    test: FeatureTable | None,
    label_column: str,
    command: str,
    held_out: FeatureTable | None = None,
) -> dict[str, Any]:
    """Weights and config, then (read back from them) the calibrator fitted on VAL, the
    thresholds, the held-out conformal rows' calibrated probabilities, and the report."""
    config = _config(
        settings, method, recipe, prepared, selection, label_column, tables, test, held_out
    )
    state = selection.best.state
    if state is None:  # pragma: no cover - select_candidate never picks a failed candidate
        raise ValueError("the selected candidate has no parameters")
    md.save_weights(folder, state)
    md.write_json(folder / md.CONFIG, config)
    model = md.TrainedModel.without_calibrator(folder, config)
    z_val = model.logits(prepared.raw_val)
    y_val = prepared.val[1]
    if settings.calibrate is not None:
        from selfcal.posthoc import build_calibrator

        model.calibrator = build_calibrator(settings.calibrate).fit(logits=z_val, labels=y_val)
        model.calibrator.save(folder / md.CALIBRATOR)
    p_val = model.calibrate(z_val)
    confidence, predicted = md.confidence_and_prediction(p_val.numpy())
    correct = predicted == y_val.numpy()
    thresholds = [
        choose_threshold(confidence, correct, kind="accuracy", target=DEFAULT_TARGET_ACCURACY),
        choose_threshold(confidence, correct, kind="coverage", target=DEFAULT_TARGET_COVERAGE),
    ]
    md.save_selective(folder, confidence, correct, thresholds, thresholds[0])
    if held_out is not None:
        assert held_out.labels is not None  # read with require_labels
        z_held = model.logits(model.features(held_out))
        labels = model.labels.encode(held_out.labels, held_out.name)
        save_calibration(folder, model.calibrate(z_held).numpy(), labels)
    report = _report(
        settings, config, selection, model, prepared, z_val, p_val, thresholds, command
    )
    report["abstention"] = stored_certificate(folder, model.labels.n_classes, config)
    md.write_json(folder / md.REPORT_JSON, report)
    (folder / md.REPORT_MD).write_text(markdown(report), encoding="utf-8")
    md.write_json(folder / md.CONFIG, md.seal(folder, config))  # last: the files are final
    return report


def _report(
    settings: TrainSettings,
    config: dict[str, Any],
    selection: Selection,
    model: md.TrainedModel,
    prepared: PreparedData,
    z_val: torch.Tensor,
    p_val: torch.Tensor,
    thresholds: list[Threshold],
    command: str,
) -> dict[str, Any]:
    calibrated = settings.calibrate is not None
    splits = {"validation": (z_val, p_val, prepared.val[1])}
    if prepared.raw_test is not None and prepared.test is not None:
        z_test = model.logits(prepared.raw_test)
        splits["test"] = (z_test, model.calibrate(z_test), prepared.test[1])
    metrics = {
        name: metrics_with_intervals(
            split_predictions(z, p, y, calibrated),
            n_resamples=settings.n_resamples,
            seed=settings.seed,
        )
        for name, (z, p, y) in splits.items()
    }
    resamples = {
        name: settings.n_resamples or default_resamples(len(y))
        for name, (_, _, y) in splits.items()
    }
    return {
        "command": command or "selfcal.pipeline.train",
        "selfcal_version": config["selfcal_version"],
        "torch_version": config["torch_version"],
        "model": {
            "method": config["method"],
            "hyperparameters": config["hyperparameters"],
            "criterion": config["criterion"]["words"],
            "checkpoint_epoch": config["checkpoint_epoch"],
            "epochs_trained": config.get("epochs_trained"),  # None: folders before the key
            "stop_by": config.get("stop_by", "nll"),  # folders from before the key: NLL
            "patience": config.get("patience"),
            "hidden": config["architecture"]["hidden"],
            "recipe": config["recipe"],
            "seed": config["seed"],
            "calibrator": settings.calibrate,
        },
        "data": {
            "columns": config["features"]["columns"],
            "classes": config["labels"]["classes"],
            "rows": config["data"]["rows"],
            "files": {k: config["data"][k] for k in ("train", "validation", "test")},
        },
        "candidates": candidates_json(selection),
        "bootstrap": {
            "n_resamples": resamples,
            "confidence": 0.95,
            "seed": settings.seed,
        },
        "metrics": metrics,
        "selective": [t.to_json() for t in thresholds],
        "conformal": config["conformal"],
    }
