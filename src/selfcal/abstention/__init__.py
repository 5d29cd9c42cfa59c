"""Abstention with a stated guarantee: answer a row only when its calibrated confidence clears a
threshold certified on held-out rows (methods §11).

**Definitions** (methods §11.1). A row is *answered* when its confidence ``c = max_k p_k`` is at
least the threshold ``t`` (``c >= t``, the convention of
:func:`selfcal.metrics.risk_coverage_curve`), and abstained on otherwise. The *selective risk* is
``R(t) = P(wrong | c >= t)``: the error rate of the answered rows. The candidate thresholds are the
distinct confidences of the ``N`` certifying rows (tied rows are answered or refused together,
:func:`selfcal.metrics.selective.tie_groups`), plus "none" (abstain on every row). On the certifying
rows, ``n_t`` rows are answered at ``t`` and ``e_t`` of them are wrong.

**Assumptions.** The certifying rows and the new rows are drawn from one distribution (i.i.d.
for ``"ltt"``; exchangeable for ``"crc"``), and the scores are a fixed function of the row: a
calibrator fitted on the certifying rows themselves breaks this (its scores depend on those
rows' labels), so calibrate on one split and certify on another.

**Rules** (:data:`RULES`; ``eps`` the target risk, ``delta`` the allowed failure probability):

* ``"ltt"`` -- Learn-then-Test (Angelopoulos, Bates, Candès, Jordan & Lei 2021; methods
  §11.2). Each candidate tests ``H_t: R(t) > eps`` with the exact binomial p-value ``p_t =
  P(Binomial(n_t, eps) <= e_t)``, valid conditionally on ``n_t`` (no row answered: ``p_t = 1``). The
  thresholds are tested in decreasing order by a multi-start fixed sequence: a threshold
  answering fewer than ``n0 = ceil(log(delta) / log(1 - eps))`` rows can never be rejected
  (``(1 - eps)^n > delta``), so a single sequence from the highest confidence would stop at
  once; instead ``J = min(3, max(1, floor(log4(N / n0)) + 1))`` sequences start at the
  first candidates answering ``n1 4^j`` rows (``n1 = ceil(log(delta/J) / log(1 - eps))``,
  ``j = 0 .. J-1``; ``J`` and the starts depend on ``N``, ``eps`` and ``delta`` only), each
  walks down rejecting while ``p_t <= delta / J`` and stops at the first ``p_t > delta / J``.
  The certified threshold is the lowest rejected one.
  **Promise**: ``P(R(t_hat) > eps) <= delta`` over the draw of the certifying rows,
  assuming also that the error rate given the confidence, ``P(wrong | c)``, is
  non-increasing in ``c`` -- which calibrated scores satisfy (``P(wrong | c) = 1 - c``): the
  family tested and the starts depend on the rows. Argument for one sequence starting at
  the ``k``-th highest confidence ``v``: ``R`` is then non-increasing too; let ``t0`` be the
  highest threshold with ``R(t0) > eps`` (every lower one is a null too). If at least ``k``
  rows have ``c >= t0``, failing needs the lowest candidate ``>= t0``, whose answered rows
  are those of ``t0``, to be rejected: ``p_t0 <= delta``, probability at most ``delta`` given
  ``n_t0``. Otherwise ``v < t0`` and failing needs the start to be rejected; given ``v``, the
  rows above it are i.i.d. with error rate ``R(v+) >= eps`` and the rows at ``v`` err with
  ``P(wrong | v) >= R(v) > eps``, so its p-value too is at most ``delta`` with probability at
  most ``delta``. ``J`` sequences at ``delta / J`` each err together with probability at most
  ``delta``. With a fixed ``grid=`` and ``fwer="bonferroni"`` or ``"holm"`` (MAPIE's
  procedures, :func:`certify_threshold`; ``p_value="hoeffding_bentkus"`` is MAPIE's p-value)
  the promise needs no monotonicity.
* ``"crc"`` -- conformal risk control (Angelopoulos, Bates, Fisch, Lei & Schuster 2022;
  methods §11.3) with
  the loss ``l_i(t) = 1{wrong_i and c_i >= t}`` (non-increasing in ``t``, at most 1): the
  smallest candidate with ``(sum_i l_i(t) + 1) / (N + 1) <= eps``. **Promise**: ``E[P(answered
  and wrong)] <= eps`` over the draw of the certifying rows -- the error rate over *all* new
  rows counting an abstention as no error, weaker than a bound on the selective risk
  (selective risk = that rate / coverage). CRC's threshold ranges over a continuum; the
  smallest candidate meeting the condition is at least CRC's, and the loss is non-increasing,
  so the promise carries over.
* ``"empirical"`` -- the smallest threshold whose selective accuracy on the rows is at least
  ``1 - eps`` (the rule of :func:`selfcal.pipeline.selective.choose_threshold` with
  ``kind="accuracy"``, ``target = 1 - eps``, which a test holds equal). **Promise: none**; on
  shared real sets its test accuracy fell below the target in about half of the re-splits.

**Per group** (Mondrian, :class:`GuaranteedAbstention` with ``groups``): one certificate per
group from that group's rows only; each group's promise holds at ``delta``, and
``simultaneous=True`` uses ``delta / G`` in each so that all ``G`` hold at once.

**When nothing can be certified**, the threshold is ``None`` (abstain on every row) and
``rows_needed`` estimates the certifying rows that would be needed at the accuracy observed
(methods §11.2): for ``"ltt"``, over the candidates with ``r_t = e_t / n_t < eps``, the
smallest ``ceil(m_t N / n_t)`` with ``m_t = ceil(log(J / delta) / kl(r_t, eps))`` answered
rows (the Chernoff bound at the sequence's level; ``ceil(log(delta / J) / log(1 - eps))``
even with no error); for ``"crc"``, ``ceil((1 - eps) / (eps - a))`` with ``a`` the most
confident group's errors per certifying row. ``None`` where no confidence level observed is
accurate enough for more rows to help.
"""

from selfcal.abstention.certificate import RULES, Certificate, certify_threshold
from selfcal.abstention.predictor import GuaranteedAbstention

__all__ = ["RULES", "Certificate", "GuaranteedAbstention", "certify_threshold"]
