"""Self-consistency (SC) loss with its policy-gradient bias correction (paper §4.2, Corollary B; DESIGN §8–9).

For one group (Q, a_{1:n}) with J rollouts A^{(j)} and horizons k1 < k2:

    p̂^(k)  = (1/J) Σ_j θ^{(j)}_{k−1},   θ^{(j)}_d = p_φ(· | a_{1:n}, A^{(j)}_{n+1:n+d}, Q)   (p̂^(1) = θ_0)
    L_SC   = H(sg(p̂^(k2)), p̂^(k1)) = −Σ_a p̂^(k2)(a) log p̂^(k1)(a)
    ℓ_j    = H(sg(p̂^(k2)), θ^{(j)}_{k1−1}),   adv_j = sg(ℓ_j − mean_j ℓ_j)
    L_pg   = mean_j clip(adv_j, −c, c) · log p_φ(A^{(j)}_{n+1:n+k1−1} | a_{1:n}, Q)
    L_anc  = KL(f ‖ θ_0),   f = the base model's K-step forecast p̂_base^(K)(· | a_{1:n}, Q) (a fixed target)
    L_fmt  = −mean_{j, d < k2} log m^{(j)}_d,   m = Σ_{a ∈ 𝒜} p_φ(a | …) under the full-vocabulary softmax
    L      = L_SC + β · L_pg + λ · L_anc + γ · L_fmt

Horizons: k1 ~ U{1 … K−1}, δ ~ U{1 … K−k1}, k2 = k1 + δ (the paper's K = 6).

Predictive scope: with `predictive_paths` = B < J the paths are split into consecutive blocks of B (the update's
micro-batches) and L_SC, L_pg (p̂, ℓ_j and the advantage baseline) are computed within each block and averaged over
blocks; L_anc and L_fmt do not depend on the split.

The anchor (ours, λ = 0 in the paper's presets) closes a degenerate minimum of L_SC: a model that puts all its
mass on one label whatever the history has L_SC = 0. Pulling θ_0 towards where the base model's own resampling
process is heading keeps what AM-PPR is meant to amortize (q ≈ θ̂_1 ≈ the base PPR estimate) in the objective.
The format term (ours, γ = 0 in the paper's presets) keeps the model answering with labels at all: every other
term sees only the softmax restricted to the labels, so without it the label mass m may drift off, and with it
the answers pass the quality control that excludes off-format questions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from beliefdrift.diagnostics.emd import kl_divergence


class SCLossOutput(NamedTuple):
    """The total loss and its terms (`sc`, `pg`, `anchor`, `format` are reported; only `loss` is differentiated)."""

    loss: torch.Tensor
    sc: torch.Tensor
    pg: torch.Tensor
    anchor: torch.Tensor
    format: torch.Tensor


def log_predictive(log_thetas: torch.Tensor, k: int) -> torch.Tensor:
    """log p̂^(k) = log (1/J) Σ_j θ^{(j)}_{k−1} from log θ [J, D+1, |𝒜|] (logsumexp over paths): [|𝒜|]."""
    return torch.logsumexp(log_thetas[:, k - 1], dim=0) - math.log(log_thetas.shape[0])


def cross_entropy(target: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """H(p, q) = −Σ_a p(a) log q(a) over the last dimension."""
    return -(target * log_probs).sum(-1)


class SelfConsistencyLoss(nn.Module):
    """L = L_SC + β·L_pg + λ·L_anc + γ·L_fmt for one group, from the per-path conditionals.

    Inputs: log_thetas [J, D+1, |𝒜|] (log θ^{(j)}_d, d = 0 … D, with D ≥ k2 − 1; differentiable), rollouts [J, D']
    (label indices, D' ≥ k1 − 1), the horizons k1 < k2; when λ > 0 the base model's forecast f [|𝒜|], when γ > 0
    the log label masses log_mass [J, D+1]. `predictive_paths`: paths per Monte-Carlo predictive (None: all J).
    """

    def __init__(
        self,
        beta: float = 0.01,
        clip: float = 5.0,
        anchor: float = 0.0,
        format_weight: float = 0.0,
        predictive_paths: int | None = None,
    ):
        super().__init__()
        self.beta = beta
        self.clip = clip
        self.anchor = anchor
        self.format_weight = format_weight
        self.predictive_paths = predictive_paths

    def forward(
        self,
        log_thetas: torch.Tensor,
        rollouts: torch.Tensor,
        k1: int,
        k2: int,
        forecast: torch.Tensor | None = None,
        log_mass: torch.Tensor | None = None,
    ) -> SCLossOutput:
        if not 1 <= k1 < k2 <= log_thetas.shape[1]:
            raise ValueError(f"need 1 ≤ k1 < k2 ≤ D+1 = {log_thetas.shape[1]}, got k1={k1}, k2={k2}")
        if self.anchor and forecast is None:
            raise ValueError("the anchor term (λ > 0) needs the base model's forecast as target")
        if self.format_weight and log_mass is None:
            raise ValueError("the format term (γ > 0) needs the log label masses")
        steps = rollouts[:, : k1 - 1].to(log_thetas.device)
        block = self.predictive_paths
        if block and block < log_thetas.shape[0]:
            blocks = zip(log_thetas.split(block), steps.split(block), strict=True)
            parts = [self._sc_pg(thetas, block_steps, k1, k2) for thetas, block_steps in blocks]
            sc, pg = (torch.stack(terms).mean() for terms in zip(*parts, strict=True))
        else:
            sc, pg = self._sc_pg(log_thetas, steps, k1, k2)
        zero = torch.zeros((), dtype=sc.dtype, device=sc.device)
        if forecast is not None:  # KL in float64 (the forecast's precision), reported in the loss's dtype
            anchor = kl_divergence(forecast.to(log_thetas.device), log_thetas[0, 0].exp()).to(sc.dtype)
        else:
            anchor = zero
        fmt = zero if log_mass is None else -log_mass[:, :k2].mean()
        loss = sc + self.beta * pg + self.anchor * anchor + self.format_weight * fmt
        return SCLossOutput(loss, sc, pg, anchor, fmt)

    def _sc_pg(self, log_thetas: torch.Tensor, steps: torch.Tensor, k1: int, k2: int) -> tuple[torch.Tensor, ...]:
        """(L_SC, L_pg) of a block of paths, its predictives and advantage baseline averaging over that block."""
        target = log_predictive(log_thetas, k2).exp().detach()
        sc = cross_entropy(target, log_predictive(log_thetas, k1))
        per_path = cross_entropy(target, log_thetas[:, k1 - 1])  # ℓ_j
        advantage = (per_path - per_path.mean()).detach().clamp(-self.clip, self.clip)
        path_log_prob = log_thetas[:, : k1 - 1].gather(-1, steps[..., None]).squeeze(-1).sum(-1)
        return sc, (advantage * path_log_prob).mean()


def draw_horizons(generator: torch.Generator, horizon: int = 6) -> tuple[int, int]:
    """(k1, k2): k1 ~ U{1 … horizon−1}, then k2 = k1 + δ with δ ~ U{1 … horizon−k1}."""
    k1 = int(torch.randint(1, horizon, (1,), generator=generator))
    return k1, k1 + int(torch.randint(1, horizon - k1 + 1, (1,), generator=generator))


def horizon_pairs(horizon: int = 6) -> list[tuple[int, int, float]]:
    """Every (k1, k2, probability) that `draw_horizons` can produce; probabilities sum to 1."""
    return [
        (k1, k2, 1 / ((horizon - 1) * (horizon - k1))) for k1 in range(1, horizon) for k2 in range(k1 + 1, horizon + 1)
    ]


def expected_sc_loss(log_thetas: torch.Tensor, horizon: int = 6) -> torch.Tensor:
    """E_{(k1,k2)}[L_SC] over the horizon distribution: a deterministic measure of a group's SC loss."""
    return sum(
        p * cross_entropy(log_predictive(log_thetas, k2).exp().detach(), log_predictive(log_thetas, k1))
        for k1, k2, p in horizon_pairs(horizon)
    )
