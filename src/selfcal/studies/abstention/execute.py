"""One set of the abstention study: the calibrators fitted once, the population calibrated by
them, and every rule certified on many re-splits and read on the population
(:mod:`selfcal.studies.abstention.engine`).

**The split.** The rows are permuted once (seeded by the run's seed): the first
``fit_share`` of them fit each calibrator (none, TS, SMS, ``auto``); the others, calibrated by
that fixed map, are the population -- the same rows for every calibrator. Re-split ``r`` of
each kind draws its rows from seed ``(seed, kind, r)`` alone, so the calibrators are compared
on the same certifying rows, split by split.

**What is stored** (metrics, one set per run), for each calibrator ``cal``, kind (``iid``,
``split``), rule (:func:`rule_configs`) and target risk ``eps``, under
``cal|kind|rule|eps|name``: ``viol`` (re-splits whose risk exceeds ``eps``), ``none``
(re-splits that certify nothing), ``cov`` and ``cov_var`` (mean and variance over re-splits
of the coverage), ``joint`` and ``joint_var`` (of ``P(answered and wrong)``), ``risk`` (mean
selective risk), and against ``none`` on the same re-splits ``dcov`` and ``dcov_var`` (the
paired coverage difference). Per group (:func:`group_certificates`): the artefact
``groups`` ``(4, G)`` -- population rows, violations, mean coverage, re-splits certifying
nothing -- and ``group_names``."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from selfcal.abstention import GuaranteedAbstention
from selfcal.experiments import RunResult
from selfcal.studies._sets import REASONS, fit_method
from selfcal.studies.abstention import engine as E
from selfcal.studies.abstention.protocol import AbstentionProtocol

SPLIT_SALT = 0xAB57
"""Mixed into the seed of the calibration split."""
CHUNK = 250
"""Re-splits certified at once (bounds the ``(R, M)`` arrays' memory)."""
GROUP_ROWS = ("rows", "viol", "cov", "none")
"""The rows of the ``groups`` artefact."""


def rule_configs(protocol: AbstentionProtocol) -> list[tuple[str, float | None]]:
    """``(rule, delta)``: the empirical rule and CRC once, each LTT rule at every delta."""
    out: list[tuple[str, float | None]] = [("empirical", None), ("crc", None)]
    for rule in ("ltt", "ltt_mapie"):
        out += [(rule, d) for d in protocol.deltas]
    return out


def rule_key(rule: str, delta: float | None) -> str:
    return rule if delta is None else f"{rule}@{delta:g}"


def key(cal: str, kind: str, rule: str, eps: float, name: str) -> str:
    """The metric name of one number (module doc)."""
    return f"{cal}|{kind}|{rule}|{eps:g}|{name}"


def calibration_split(n: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(fit rows, population rows)``: a seeded permutation, its first ``floor(share n)``."""
    order = np.random.default_rng([seed, SPLIT_SALT]).permutation(n)
    cut = int(share * n)
    return order[:cut], order[cut:]


def resplit_seeds(seed: int, kind: str, count: int) -> np.ndarray:
    """The seed of each re-split of ``kind`` (one integer each, distinct across kinds)."""
    return seed * 10**7 + (E.KINDS.index(kind) + 1) * 10**6 + np.arange(count)


def _chunks(seeds: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, seeds.shape[0], CHUNK):
        yield seeds[start : start + CHUNK]


def levels_of(
    pop: E.Population, d: E.Draws, rule: str, eps: float, delta: float | None
) -> np.ndarray:
    """The certified level of ``rule`` on every re-split of ``d``."""
    if rule == "empirical":
        return E.empirical(d, eps)
    if rule == "crc":
        return E.crc(d, eps)
    assert delta is not None
    return E.ltt(d, eps, delta) if rule == "ltt" else E.ltt_grid(pop, d, eps, delta)


def certify_all(
    protocol: AbstentionProtocol, pop: E.Population, kind: str, seed: int
) -> dict[tuple[str, float], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{(rule key, eps): (risk, coverage, joint risk)}``, each ``(R,)`` over the re-splits."""
    parts: dict[tuple[str, float], list[tuple[np.ndarray, ...]]] = {}
    for seeds in _chunks(resplit_seeds(seed, kind, protocol.resplits)):
        d = E.draw(pop, kind, seeds)
        for rule, delta in rule_configs(protocol):
            for eps in protocol.eps:
                level = levels_of(pop, d, rule, eps, delta)
                parts.setdefault((rule_key(rule, delta), eps), []).append(E.read(pop, d, level))
    return {
        k: tuple(np.concatenate([p[i] for p in v]) for i in range(3))  # type: ignore[misc]
        for k, v in parts.items()
    }


def summarise(
    cal: str, kind: str, found: dict[tuple[str, float], Any], base: dict[tuple[str, float], Any]
) -> dict[str, float]:
    """The metrics of one calibrator and kind (module doc); ``base``: ``none``'s arrays."""
    out: dict[str, float] = {}
    for (rule, eps), (risk, cov, joint) in found.items():
        out[key(cal, kind, rule, eps, "viol")] = float(np.sum(risk > eps))
        out[key(cal, kind, rule, eps, "none")] = float(np.sum(cov == 0))
        out[key(cal, kind, rule, eps, "cov")] = float(cov.mean())
        out[key(cal, kind, rule, eps, "cov_var")] = float(cov.var(ddof=1))
        out[key(cal, kind, rule, eps, "joint")] = float(joint.mean())
        out[key(cal, kind, rule, eps, "joint_var")] = float(joint.var(ddof=1))
        out[key(cal, kind, rule, eps, "risk")] = float(risk.mean())
        if base is not found and (rule, eps) in base:
            diff = cov - base[(rule, eps)][1]
            out[key(cal, kind, rule, eps, "dcov")] = float(diff.mean())
            out[key(cal, kind, rule, eps, "dcov_var")] = float(diff.var(ddof=1))
    return out


def group_certificates(
    protocol: AbstentionProtocol,
    probs: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    seed: int,
) -> tuple[np.ndarray, list[str]]:
    """Per group, over ``group_resplits`` i.i.d. re-splits of the population (the ``iid``
    kind's first rows): :class:`~selfcal.abstention.GuaranteedAbstention` (rule ``"ltt"``,
    ``group_eps``, ``group_delta``) fitted with ``groups=`` on the drawn rows, each group's
    threshold read on that group's population rows. ``(4, G)`` (:data:`GROUP_ROWS`) and the
    group names."""
    names = sorted(set(groups.tolist()))
    conf = probs.max(1)
    wrong = probs.argmax(1) != labels
    members = [np.flatnonzero(groups == g) for g in names]
    table = np.zeros((len(GROUP_ROWS), len(names)))
    table[0] = [m.shape[0] for m in members]
    eps = protocol.group_eps
    for s in resplit_seeds(seed, "iid", protocol.group_resplits):
        rows = np.random.default_rng(int(s)).integers(0, labels.shape[0], labels.shape[0] // 2)
        model = GuaranteedAbstention(eps, protocol.group_delta, "ltt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(probs[rows], labels[rows], groups=groups[rows])
        certs = model.certificates_
        for g, (name, member) in enumerate(zip(names, members, strict=True)):
            cert = certs.get(name)
            if cert is None or cert.threshold is None:
                table[3, g] += 1
                continue
            answered = conf[member] >= cert.threshold
            risk = wrong[member][answered].mean() if answered.any() else 0.0
            table[1, g] += float(risk > eps)
            table[2, g] += answered.mean()
    table[2] /= protocol.group_resplits
    return table, [str(n) for n in names]


def text_artefact(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


def evaluate_rows(
    protocol: AbstentionProtocol,
    scores: np.ndarray,
    kind: str,
    labels: np.ndarray,
    groups: np.ndarray | None,
    seed: int,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Every calibrator, kind, rule and target risk on one set's rows (module doc):
    ``(metrics, artefacts)``."""
    fit, rows = calibration_split(labels.shape[0], protocol.fit_share, seed)
    metrics: dict[str, float] = {
        "n_rows": float(labels.shape[0]),
        "n_fit": float(fit.shape[0]),
        "n_population": float(rows.shape[0]),
        "n_classes": float(scores.shape[1]),
    }
    artefacts: dict[str, np.ndarray] = {}
    reasons: dict[str, str] = {}
    base: dict[str, Any] = {}
    y = labels[rows]
    for cal in protocol.calibrators:
        probs, reason = fit_method(
            cal, kind, (scores[fit], labels[fit], None), (scores[rows], None)
        )
        if probs is None:
            reasons[cal] = reason
            continue
        pop = E.population(probs.max(1), probs.argmax(1) == y)
        metrics[f"{cal}|accuracy"] = float(np.mean(probs.argmax(1) == y))
        metrics[f"{cal}|levels"] = float(pop.levels.shape[0])
        for k in E.KINDS:
            found = certify_all(protocol, pop, k, seed)
            base.setdefault(k, found)
            metrics.update(summarise(cal, k, found, base[k]))
        if groups is not None and cal == protocol.group_calibrator:
            table, names = group_certificates(protocol, probs, y, groups[rows], seed)
            artefacts["groups"] = table
            artefacts["group_names"] = text_artefact(names)
    if reasons:
        artefacts[REASONS] = text_artefact(reasons)
    return metrics, artefacts


def synthetic_set(n_rows: int, n_classes: int, seed: int) -> tuple[np.ndarray, ...]:
    """``(logits, labels, groups)``: true logits ``z ~ N(0, 1)`` per class plus 2 on one
    class drawn at random, scaled by a group's difficulty (groups ``A``-``D`` of shares 0.4,
    0.3, 0.2, 0.1 and scales 2.5, 2, 1.5, 1); the label drawn from ``softmax(z)``; the model's
    logits ``2 z`` (overconfident, so that calibrating helps)."""
    rng = np.random.default_rng([seed, 0x5E7])
    group = rng.choice(4, size=n_rows, p=[0.4, 0.3, 0.2, 0.1])
    z = rng.normal(size=(n_rows, n_classes))
    z[np.arange(n_rows), rng.integers(0, n_classes, n_rows)] += 2.0
    z *= np.array([2.5, 2.0, 1.5, 1.0])[group][:, None]
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (rng.random((n_rows, 1)) > np.cumsum(p, 1)).sum(1)
    return 2 * z, np.minimum(labels, n_classes - 1), np.array(list("ABCD"))[group]


def evaluate_synthetic(protocol: AbstentionProtocol, seed: int) -> RunResult:
    """The synthetic set (:func:`synthetic_set`) through :func:`evaluate_rows`."""
    logits, labels, groups = synthetic_set(
        protocol.synthetic_rows, protocol.synthetic_classes, seed
    )
    metrics, artefacts = evaluate_rows(protocol, logits, "logits", labels, groups, seed)
    return RunResult(metrics, artefacts)
