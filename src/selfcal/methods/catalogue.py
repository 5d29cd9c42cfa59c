"""The trainable methods -- one catalogue for ``selfcal train`` and every study -- with their
hyperparameter candidates and selection criteria, and how one of them trains (its step
strategy in the one training loop, :func:`method_step`).

Each :class:`Method` says how it trains (``kind``, ``base``, ``fixed``: its
:data:`MethodSpec`, what the studies fingerprint), its candidates on tabular data (the
benchmark's grids, ``selfcal train``'s default) and the criterion that selects among them:

* the candidates: focal γ ∈ {1, 2, 3}, label smoothing ε ∈ {0.05, 0.1}, MMCE λ ∈ {1, 2, 4},
  dual focal γ ∈ {1, 3, 5}, BSCE and BSCE-GRA γ ∈ {1, 3, 5} × norm ∈ {1, 2}, the meta learning
  rate of the meta-learned regularisers ∈ {1e-5, 1e-4, 1e-3}, and BO4SC's one point T = 10,
  η_w = 100, β = 10 (the BO4SC study's pilot choice for the 3 x 64 network; results/bo4sc);
* the criterion: the lowest validation ECE (15 equal-width bins, before any post-hoc
  calibration) of the checkpointed model, as the benchmark and the image studies select --
  except BO4SC, which the BO4SC study selects by its own outer objective, the validation BCE
  of the smooth confidence p̂ against correctness (with one candidate nothing is selected,
  but a ``--grid`` of several is).

Methods without tuned hyperparameters (CE, Brier, mixup with α = 1, FLSD-53's fixed schedule)
have one candidate. The methods themselves: the losses in methods §3 and §7 ([GRA]), summed
over the batch as methods §0.1 says; CE-DECE and CE-SECE in methods §5 ([MC]); the γ-Net in
methods §6 ([MetaReg]; ``flγ``, meta-trained on cross-entropy, is our reading of its Table 2
ablation, methods §6.6 item 8); BO4SC in methods §4 ([BO4SC]).

Used by ``selfcal train`` (:mod:`selfcal.pipeline`) and by the studies; the grids and criteria
come from :mod:`selfcal.selection`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from selfcal._validation import check_choice
from selfcal.selection import VAL_ECE, Candidates, Criterion, Grid

Kind = Literal["loss", "mixup", "meta", "bo4sc"]
MethodSpec = tuple[str, str, dict[str, Any]]
"""``(kind, loss or meta method, fixed options)``: how a method trains (:func:`method_step`)."""

VAL_BCE = Criterion(
    "val_bce", words="lowest validation BCE of p̂ against correctness (BO4SC's own outer objective)"
)
"""BO4SC's criterion in the BO4SC study (its outer loss on the validation set)."""
GAMMAS = (1.0, 3.0, 5.0)
META_LRS = (1e-5, 1e-4, 1e-3)
BO4SC_POINT = {"beta": 10.0, "inner_steps": 10, "weight_lr": 100.0}
"""BO4SC's candidate: the BO4SC study's pilot point for the 3 x 64 network (results/bo4sc)."""


@dataclass(frozen=True)
class Method:
    """One trainable method: ``kind`` and ``base`` say how it trains (``"loss"``: a
    :class:`~selfcal.training.LossStep` on ``build_loss(base, **fixed, **candidate)``;
    ``"mixup"``: a :class:`~selfcal.training.MixupStep` on the loss ``base`` with ``fixed``'s
    ``alpha``; ``"meta"``: a :class:`~selfcal.bilevel.MetaStep` with ``method=base``;
    ``"bo4sc"``: :class:`~selfcal.bilevel.BO4SC`), ``candidates`` the hyperparameter points
    selected among by ``criterion``, ``summary`` one line for ``--help``."""

    name: str
    kind: Kind
    base: str
    summary: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    candidates: Grid | Candidates | None = None
    criterion: Criterion = VAL_ECE

    @property
    def spec(self) -> MethodSpec:
        """``(kind, base, fixed options)`` (a fresh dict), what :func:`method_step` reads."""
        return (self.kind, self.base, dict(self.fixed))

    def configs(self) -> list[dict[str, Any]]:
        """The candidate hyperparameter points (one empty point without a grid)."""
        return [{}] if self.candidates is None else self.candidates.configs()

    def axes(self) -> dict[str, tuple[Any, ...]]:
        """Each tuned hyperparameter with its candidate values, in grid order."""
        if self.candidates is None:
            return {}
        if isinstance(self.candidates, Grid):
            return dict(self.candidates.axes)
        values: dict[str, list[Any]] = {}
        for point in self.candidates.configs():
            for key, value in point.items():
                if value not in values.setdefault(key, []):
                    values[key].append(value)
        return {k: tuple(v) for k, v in values.items()}

    def with_grid(self, overrides: Mapping[str, Sequence[Any]]) -> Method:
        """This method with some candidate axes replaced (``--grid NAME=V1,V2``): the grid
        over the axes of :meth:`axes` with ``overrides`` in place of their values."""
        if not overrides:
            return self
        axes = self.axes()
        if not axes:
            raise ValueError(f"method {self.name!r} has no tuned hyperparameters (--grid)")
        unknown = sorted(set(overrides) - set(axes))
        if unknown:
            raise ValueError(
                f"method {self.name!r} has no hyperparameter {unknown[0]!r}; its hyperparameters "
                f"are {', '.join(axes)}"
            )
        merged = {k: tuple(overrides.get(k, v)) for k, v in axes.items()}
        return dataclasses.replace(self, candidates=Grid(self.name, **merged))

    def describe_candidates(self) -> str:
        return "one candidate" if self.candidates is None else self.candidates.describe()


def _m(
    name: str,
    kind: Kind,
    base: str,
    summary: str,
    candidates: Grid | Candidates | None = None,
    criterion: Criterion = VAL_ECE,
    **fixed: Any,
) -> Method:
    return Method(name, kind, base, summary, fixed, candidates, criterion)


def _meta(name: str, base: str, objective: str, summary: str) -> Method:
    """A meta-learned regulariser with the meta learning rate tuned."""
    return _m(name, "meta", base, summary, Grid(name, meta_lr=META_LRS), meta_objective=objective)


_META_LR = "meta lr ∈ {1e-5, 1e-4, 1e-3}"
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        _m(
            "ce",
            "loss",
            "ce",
            "cross-entropy, the baseline (with the default --calibrator ts: CE + TS)",
        ),
        _m("brier", "loss", "brier", "the Brier score as the training loss"),
        _m(
            "focal",
            "loss",
            "focal",
            "focal loss (1 - p_y)^γ CE, γ ∈ {1, 2, 3}",
            Grid("focal", gamma=(1.0, 2.0, 3.0)),
        ),
        _m(
            "label-smoothing",
            "loss",
            "ls",
            "CE on labels smoothed by ε ∈ {0.05, 0.1}",
            Grid("label-smoothing", eps=(0.05, 0.1)),
        ),
        _m("mixup", "mixup", "ce", "mixup training with α = 1 on CE", alpha=1.0),
        _m(
            "mmce",
            "loss",
            "mmce",
            "CE + λ MMCE kernel calibration penalty, λ ∈ {1, 2, 4}",
            Grid("mmce", lam=(1.0, 2.0, 4.0)),
        ),
        _m("flsd-53", "loss", "flsd53", "sample-dependent focal loss (γ = 5 if p_y < 0.2, else 3)"),
        _m("dfl", "loss", "dfl", "dual focal loss, γ ∈ {1, 3, 5}", Grid("dfl", gamma=GAMMAS)),
        _m(
            "bsce",
            "loss",
            "bsce",
            "Brier-score-weighted CE, γ ∈ {1, 3, 5} × norm ∈ {1, 2}",
            Grid("bsce", gamma=GAMMAS, norm=(1, 2)),
        ),
        _m(
            "bsce-gra",
            "loss",
            "bsce-gra",
            "BSCE weighting the gradient instead of the loss, γ ∈ {1, 3, 5} × norm ∈ {1, 2}",
            Grid("bsce-gra", gamma=GAMMAS, norm=(1, 2)),
        ),
        _meta(
            "ce-dece",
            "unit-l2",
            "dece",
            f"CE with a meta-learned unit-wise L2 penalty on a DECE meta-objective, {_META_LR}",
        ),
        _meta(
            "ce-sece",
            "unit-l2",
            "sece",
            f"CE with a meta-learned unit-wise L2 penalty on a SECE meta-objective, {_META_LR}",
        ),
        _meta(
            "flγ",
            "gamma-net",
            "ce",
            "focal loss with a per-sample γ from a γ-Net meta-learned on cross-entropy "
            f"(the γ-Net without SECE), {_META_LR} (also: flg)",
        ),
        _meta(
            "flγ-dece",
            "gamma-net",
            "dece",
            "focal loss with a per-sample γ from a γ-Net meta-learned on DECE, "
            f"{_META_LR} (also: flg-dece)",
        ),
        _meta(
            "flγ-sece",
            "gamma-net",
            "sece",
            "focal loss with a per-sample γ from a meta-learned γ-Net on a SECE "
            f"meta-objective, {_META_LR} (also: flg-sece)",
        ),
        _m(
            "bo4sc",
            "bo4sc",
            "bo4sc",
            "bilevel per-sample weights fitted so a smooth confidence matches correctness "
            "(T = 10, η_w = 100, β = 10)",
            Candidates("bo4sc", [BO4SC_POINT]),
            VAL_BCE,
        ),
    )
}
"""Method name -> :class:`Method`, by family."""
ALIASES = {
    "ls": "label-smoothing",
    "flsd53": "flsd-53",
    "flg": "flγ",
    "flg-dece": "flγ-dece",
    "flg-sece": "flγ-sece",
}
"""Other spellings accepted for a method name (the meta-regularization study's among them)."""


def method_names() -> tuple[str, ...]:
    """The method names (without aliases), in catalogue order."""
    return tuple(METHODS)


def get_method(name: str) -> Method:
    """The method called ``name`` (or an alias of :data:`ALIASES`)."""
    canonical = ALIASES.get(name, name)
    check_choice("method", canonical, METHODS)
    return METHODS[canonical]


def method_step(spec: MethodSpec, options: Mapping[str, Any], meta_val: tuple) -> Any:
    """The training step of the method ``spec = (kind, base, fixed options)`` with the
    candidate's ``options`` added (:mod:`selfcal.training.steps`): ``"loss"`` -- a
    :class:`~selfcal.training.LossStep` on ``build_loss(base, **fixed, **options)``;
    ``"mixup"`` -- a :class:`~selfcal.training.MixupStep` on the loss ``base`` with
    ``alpha = fixed["alpha"]``; ``"meta"`` -- a :class:`~selfcal.bilevel.MetaStep` with
    ``method=base`` on ``meta_val``. (BO4SC has no step: it is its own bilevel loop.)"""
    kind, base, fixed = spec
    if kind == "meta":
        from selfcal.bilevel import MetaStep

        return MetaStep(meta_val, method=base, **fixed, **options)
    from selfcal.losses import build_loss
    from selfcal.training import LossStep, MixupStep

    if kind == "mixup":
        return MixupStep(build_loss(base, reduction="sum"), fixed["alpha"])
    if kind != "loss":
        raise ValueError(f"a {kind!r} method has no training step")
    return LossStep(build_loss(base, **fixed, **options, reduction="sum"))
