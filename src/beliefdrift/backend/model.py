"""What every model the engine runs gives: θ over the answer labels (`AnswerDist`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AnswerDist:
    """θ over the answer labels and how much full-vocabulary mass the labels hold.

    probs = softmax(logits[label_ids]);  valid_mass = Σ_labels softmax(logits)[label].
    """

    probs: torch.Tensor  # [..., K]
    valid_mass: torch.Tensor  # [...]

    @classmethod
    def from_logits(cls, logits: torch.Tensor, label_ids: torch.Tensor) -> AnswerDist:
        """From the model's next-token logits [..., V] and the labels' token ids [K]."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return cls.from_logprobs(log_probs[..., label_ids])

    @classmethod
    def from_logprobs(cls, label_logprobs: torch.Tensor) -> AnswerDist:
        """From the labels' log-probabilities [..., K] under the full-vocabulary softmax (ℓ[labels]):
        θ = softmax(ℓ[labels]), valid_mass = Σ exp(ℓ[labels])."""
        return cls(torch.softmax(label_logprobs, dim=-1), label_logprobs.exp().sum(-1))

    def cpu(self) -> AnswerDist:
        """The same distribution on the CPU, where sampling and estimators run."""
        return AnswerDist(self.probs.cpu(), self.valid_mass.cpu())

    def select(self, index: torch.Tensor | list[int]) -> AnswerDist:
        """The distributions of the paths `index` names, in that order."""
        return AnswerDist(self.probs[index], self.valid_mass[index])

    @staticmethod
    def concat(dists: list[AnswerDist]) -> AnswerDist:
        """The distributions of every path of `dists`, one after another."""
        return AnswerDist(torch.cat([d.probs for d in dists]), torch.cat([d.valid_mass for d in dists]))
