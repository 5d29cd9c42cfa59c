"""The fitted split-conformal predictor as a ``torch.nn.Module`` of scores alone
(:meth:`selfcal.conformal.split.SplitConformal.to_module`)."""

from __future__ import annotations

import torch

from selfcal.conformal.scores import scores_given_u, uniforms


def seeded_generator(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


class ConformalSetModule(torch.nn.Module):
    """``(N, C)`` logits or probabilities -> ``(N, C)`` bool prediction sets of fitted
    thresholds (:meth:`~selfcal.conformal.split.SplitConformal.to_module`).
    ``forward(scores, generator=None)``: randomised scores draw ``u`` from ``generator`` when
    given, else from a fresh generator seeded with the module's ``seed`` on the input's
    device."""

    thresholds: torch.Tensor

    def __init__(
        self,
        thresholds: torch.Tensor,
        score: str,
        *,
        from_probs: bool,
        randomized: bool,
        seed: int,
        penalty: float,
        k_reg: int,
        weight: float,
    ) -> None:
        super().__init__()
        self.register_buffer("thresholds", thresholds.double())
        self.score = score
        self.from_probs = from_probs
        self.randomized = randomized and score != "lac"
        self.seed = seed
        self.penalty, self.k_reg, self.weight = penalty, k_reg, weight

    def forward(
        self, scores: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        x = scores.double()
        p = x if self.from_probs else torch.softmax(x, dim=1)
        u: torch.Tensor | float = 1.0
        if self.randomized:
            gen = generator if generator is not None else seeded_generator(self.seed, p.device)
            u = uniforms(tuple(p.shape), gen, p.device)
        s = scores_given_u(p, u, self.score, self.penalty, self.k_reg, self.weight)
        return s <= self.thresholds.to(s.device)
