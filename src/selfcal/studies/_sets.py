"""What the studies run on the user's own prediction sets share: one run per set found under
the folder ``$SELFCAL_PREDICTIONS`` names (``selfcal reproduce NAME --sets DIR`` sets it for
the sweep and its workers), identified by the set's name and the digest of its files -- so a
set whose files change is a new run, never a stale stored one, and moving the folder changes
nothing -- and the set's rows, resampled for paired intervals over its test rows. A set that
cannot be read or is refused is a failed run whose reason names it in the one line ``selfcal
compare`` prints (:func:`set_result`); what fails inside a set is recorded by name and reason
(:data:`REASONS`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfcal._inputs import Groups
from selfcal.exceptions import one_line
from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.store import RunRecord
from selfcal.io import (
    PredictionSet,
    default_sets_kind,
    default_sets_root,
    file_digest,
    find_prediction_sets,
    load_prediction_set,
)
from selfcal.io._sets import set_name
from selfcal.posthoc import build_calibrator
from selfcal.posthoc._costs import memory_refusal

SET_METHOD = "set"
"""The ``method`` of every run on a prediction set (the set's name is its ``dataset``)."""
PROTOCOL = "sets"
"""The protocol name of the studies that run on prediction sets."""


def set_digest(path: Path) -> str:
    """First 12 hex digits of the SHA-256 of the set's files (``val.npz`` then ``test.npz``,
    or the one file), read by the one reader of untrusted files
    (:func:`selfcal.io.file_digest`): regular files only, no larger than the arrays cap, in
    blocks -- a set's file linked to ``/dev/zero`` or a FIFO is refused, never read."""
    files = [path / "val.npz", path / "test.npz"] if path.is_dir() else [path]
    return file_digest(*files)[:12]


UNREAD = "unread"
"""The ``hp.digest`` of a set whose files the reader refused when the sweep listed them: its
run reads them again (:func:`spec_set`) and fails with the reader's line naming the file, as
``selfcal compare`` refuses it, while the other sets run."""


def listed_digest(path: Path) -> str:
    """:func:`set_digest`, or :data:`UNREAD` where the reader refuses the set's files (a
    device, a FIFO, past the cap): one set's refusal is its own failed run, never the
    sweep's."""
    try:
        return set_digest(path)
    except (OSError, ValueError):
        return UNREAD


def set_specs(study: Any, protocol: Any) -> list[RunSpec]:
    """One spec per prediction set under ``$SELFCAL_PREDICTIONS``: ``dataset`` its name,
    ``hp.digest`` its files' digest, and ``hp.kind`` the kind the scores are read as where
    ``$SELFCAL_PREDICTIONS_KIND`` gives one (``--kind``: a run of another reading, never
    the stored one; without it the spec is as before, so stored runs stay valid)."""
    kind = default_sets_kind()
    extra = {} if kind is None else {"kind": kind}
    return [
        study.spec(
            protocol, set_name(path), SET_METHOD, 0, config={"digest": listed_digest(path), **extra}
        )
        for path in find_prediction_sets(default_sets_root())
    ]


def spec_set(spec: RunSpec) -> PredictionSet:
    """The prediction set ``spec`` names, read from ``$SELFCAL_PREDICTIONS`` (the name picks
    one set: :func:`~selfcal.io.find_prediction_sets` refuses two of one name); a set whose
    files changed since the spec was made is a ``ValueError`` (rerun the sweep)."""
    by_name = {set_name(p): p for p in find_prediction_sets(default_sets_root())}
    path = by_name.get(spec.dataset)
    if path is None:
        raise FileNotFoundError(f"prediction set {spec.dataset!r} is no longer under the folder")
    if set_digest(path) != spec.hparams["hp.digest"]:
        raise ValueError(f"{path}: changed since the sweep began; run it again")
    kind = spec.hparams.get("hp.kind")
    return load_prediction_set(path, kind=None if kind is None else str(kind))


def set_place(name: str) -> Path:
    """Where the set ``name`` lies under ``$SELFCAL_PREDICTIONS`` (its folder or its one
    file), to name it in a message; the folder joined with the name where it is gone."""
    root = default_sets_root()
    try:
        found = [path for path in find_prediction_sets(root) if set_name(path) == name]
    except (OSError, ValueError):
        found = []
    return found[0] if found else root / name


def set_result(evaluate: Any, protocol: Any, spec: RunSpec) -> RunResult:
    """``evaluate(protocol, spec)``, or -- where the set cannot be read or is refused (a
    ``ValueError`` or ``OSError``) -- a failed run whose reason is the one line ``selfcal
    compare`` prints for it, naming the set (:func:`selfcal.exceptions.one_line`). What fails
    inside a set (one calibrator, one step) is the executor's to record, not a reason to lose
    the set."""
    try:
        return evaluate(protocol, spec)
    except (OSError, ValueError) as error:
        return RunResult.failure(one_line(error, set_place(spec.dataset)))


REASONS = "reasons"
"""The artefact that says why each calibrator or step could not be fitted on a set
(``{name: reason}`` as UTF-8 JSON bytes: a run's metrics and arrays are numbers only); absent
where every one was fitted."""


READ_FROM = "read_from"
"""The artefact that says where a set's files were read from when symbolic links in the set led
elsewhere (:meth:`~selfcal.io.PredictionSet.read_from`, UTF-8 bytes); absent where none did."""


def set_artefacts(data: PredictionSet, reasons: dict[str, str]) -> dict[str, np.ndarray]:
    """``{REASONS: ..., READ_FROM: ...}`` for a run's artefacts, each only where it says
    something: why calibrators or steps could not be fitted, where linked files led."""
    texts = {REASONS: json.dumps(reasons, sort_keys=True, ensure_ascii=False) if reasons else ""}
    texts[READ_FROM] = data.read_from()
    return {
        name: np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
        for name, text in texts.items()
        if text
    }


def _stored_text(results: Any, record: RunRecord, name: str) -> str:
    if name not in record.artefacts:
        return ""
    return str(results.store.artefact(record.key, name).tobytes().decode("utf-8"))


def stored_reasons(results: Any, record: RunRecord) -> dict[str, str]:
    """Why each calibrator or step could not be fitted on ``record``'s set (empty where every
    one was, or the run was stored before the reasons were)."""
    found = json.loads(_stored_text(results, record, REASONS) or "{}")
    return {str(name): str(reason) for name, reason in found.items()}


def linked_lines(results: Any) -> list[str]:
    """A report's section naming, for each set whose files symbolic links in the set led
    elsewhere, where they were read from (nothing where no set's did)."""
    from selfcal._markdown import markdown_text

    found = [(r.spec.dataset, _stored_text(results, r, READ_FROM)) for r in results.records]
    lines = [f"- {markdown_text(name)}: {markdown_text(text)}" for name, text in found if text]
    return ["## Sets read through links", "", *lines, ""] if lines else []


def test_resamples(n: int, count: int) -> np.ndarray:
    """``(count, n)`` multiplicities of seeded bootstrap resamples of ``n`` test rows (the same
    for every set of ``n`` rows, so sets that share their test rows are resampled jointly)."""
    from selfcal.metrics.bootstrap import Resamples

    return np.concatenate([w.numpy() for w in Resamples(n, count, 0, _cpu()).chunks()])


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


class SetsStudy:
    """What a study with a prediction-sets protocol (``selfcal reproduce NAME --sets DIR``)
    adds to :class:`~selfcal.experiments.study.Study`, by the folder convention: under its
    :attr:`sets_protocol` the specs are :func:`set_specs` (under the others, the study's
    ``source_specs``), the executor is the folder's
    ``sets.evaluate_set`` and the report its ``sets_report`` (``sections``, ``summary``,
    ``payload``), with no figures, headed :attr:`sets_heading`. Listed before ``Study`` among
    the bases."""

    sets_protocol: type
    sets_heading: str

    def _on_sets(self, protocol: Any) -> bool:
        return isinstance(protocol, self.sets_protocol)

    def specs(self, protocol: Any) -> list[RunSpec]:
        if self._on_sets(protocol):
            return set_specs(self, protocol)
        return self.source_specs(protocol)

    def source_specs(self, protocol: Any) -> list[RunSpec]:  # pragma: no cover - abstract
        """The runs of the study's other protocols."""
        raise NotImplementedError

    def execute(self, protocol: Any, group: list[RunSpec]) -> list[Any]:
        if self._on_sets(protocol):
            evaluate = self.part("sets").evaluate_set  # type: ignore[attr-defined]
            return [set_result(evaluate, protocol, spec) for spec in group]
        return super().execute(protocol, group)  # type: ignore[misc]

    def heading(self, protocol: Any) -> str:
        return self.sets_heading if self._on_sets(protocol) else super().heading(protocol)  # type: ignore[misc]

    def sections(self, results: Any) -> list[str]:
        if self._on_sets(results.protocol):
            return self.part("sets_report").sections(results)  # type: ignore[attr-defined]
        return super().sections(results)  # type: ignore[misc]

    def summary(self, results: Any) -> list[str]:
        if self._on_sets(results.protocol):
            return self.part("sets_report").summary(results)  # type: ignore[attr-defined]
        return super().summary(results)  # type: ignore[misc]

    def payload(self, results: Any) -> Any:
        if self._on_sets(results.protocol):
            return self.part("sets_report").payload(results)  # type: ignore[attr-defined]
        return super().payload(results)  # type: ignore[misc]

    def figures(self, results: Any) -> Any:
        return {} if self._on_sets(results.protocol) else super().figures(results)  # type: ignore[misc]


# ------------------------------------------------------------------ calibrators per set
def softmax(scores: np.ndarray, kind: str) -> np.ndarray:
    if kind == "probs":
        return np.asarray(scores, dtype=np.float64)
    return torch.softmax(torch.as_tensor(scores).double(), 1).numpy()


def fit_method(
    name: str,
    kind: str,
    fit: tuple[np.ndarray, np.ndarray, Groups | None],
    measure: tuple[np.ndarray, Groups | None],
) -> tuple[np.ndarray | None, str]:
    """Calibrator ``name`` (or ``"none"``: the scores' own probabilities) fitted on ``fit``
    (scores, labels, groups) and its probabilities of the ``measure`` scores, and ``""``; or
    ``None`` and why it could not be fitted (too large for memory, or a one-line error).
    Groups (``None``: none) are given to a calibrator that takes them
    (:func:`group_arguments`) and to no other (which refuses them). Its warnings (degenerate
    fits) are not shown: they are a fit like any other. The one fit of the studies on
    prediction sets that fit calibrators per set (``groups``, ``abstention``)."""
    scores, labels, groups = fit
    if name == "none":
        return softmax(measure[0], kind), ""
    too_large = memory_refusal(name, scores.shape[1])
    if too_large is not None:
        return None, too_large
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cal = build_calibrator(name, kind=kind)
            fit_groups, predict_groups = group_arguments(cal)
            fit_groups = fit_groups and groups is not None
            cal.fit(**{kind: scores}, labels=labels, **({"groups": groups} if fit_groups else {}))
            extra = {"groups": measure[1]} if predict_groups(cal) else {}
            probs = cal.predict_proba(**{kind: measure[0]}, **extra)
        except ValueError as error:
            return None, one_line(error)
    return np.asarray(probs, dtype=np.float64), ""


def group_arguments(cal: Any) -> tuple[bool, Callable[[Any], bool]]:
    """Whether ``cal`` takes ``groups=`` to fit (it ``uses_groups``, or ``accepts_groups``),
    and how to tell, once fitted, whether its predictions need them (``needs_groups()``
    where it has one, else ``uses_groups``)."""
    uses = bool(getattr(cal, "uses_groups", False))
    takes = uses or bool(getattr(cal, "accepts_groups", False))

    def needs(fitted: Any) -> bool:
        method = getattr(fitted, "needs_groups", None)
        return bool(method()) if callable(method) else uses

    return takes, needs
