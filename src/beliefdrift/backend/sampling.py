"""Drawing from distributions on the model's device: the inverse CDF every draw goes through, the nucleus sampler
chain-of-thought tokens are drawn with, and its inverse for a model that gives only its top log-probabilities
(`nucleus_logits`: logits on which the sampler draws what it draws on the full ones)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Sampler = Callable[[torch.Tensor], torch.Tensor]


def inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One index [B, 1] per row of non-negative weights [B, K] for uniforms [B, 1] in [0, 1): the first k with
    F_k > u·F_K, F the cumulative weights in float64 (so k is drawn with probability w_k / Σ w)."""
    cdf = weights.double().cumsum(-1)
    return torch.searchsorted(cdf, uniforms * cdf[:, -1:], right=True).clamp(max=weights.shape[-1] - 1)


def _draw(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of non-negative weights [B, K], drawn ∝ weight by inverting the CDF."""
    uniforms = torch.rand(len(weights), 1, generator=generator, dtype=torch.float64, device=weights.device)
    return inverse_cdf(weights, uniforms)[:, 0]


def _most_likely(probs: torch.Tensor, top_p: float, candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities [B, K] in descending order and their token ids, K large enough that every row's first
    K hold `top_p` of its mass: the top `candidates` where that holds (checked on the host, so on the CPU
    only), else the whole vocabulary."""
    if probs.is_cpu:
        top, order = probs.topk(min(candidates, probs.shape[-1]), -1)
        if not bool((top.sum(-1) < top_p).any()):
            return top, order
    return probs.sort(-1, descending=True)


def nucleus_sampler(temperature: float, top_p: float, generator: torch.Generator, candidates: int = 256) -> Sampler:
    """Draw one token per row of logits [B, V] from softmax(logits / T) restricted to the smallest set of
    most likely tokens whose probability reaches `top_p` (T = 0: greedy).

    Sampling runs on the logits' device, so only the [B] token ids leave it. On the CPU it draws from
    `generator` and searches the set among the top `candidates` tokens when they hold `top_p` of the mass
    (then it lies inside them), else in the fully sorted vocabulary. On another device it draws from a
    generator there, seeded by one draw from `generator` on first use, and always sorts the vocabulary
    (cheaper there than asking the host whether the candidates suffice)."""
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    generators = {torch.device("cpu"): generator}

    def generator_on(device: torch.device) -> torch.Generator:
        if device not in generators:
            seed = int(torch.randint(2**63 - 1, (), generator=generator))
            generators[device] = torch.Generator(device).manual_seed(seed)
        return generators[device]

    def sample(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if temperature == 0:
            return logits.argmax(-1)
        draw_from = generator_on(logits.device)
        probs = torch.softmax(logits / temperature, -1)
        if top_p == 1:
            return _draw(probs, draw_from)
        top, order = _most_likely(probs, top_p, candidates)
        keep = (top.cumsum(-1) - top) < top_p  # the most likely token is always kept
        return order.gather(-1, _draw(top * keep, draw_from)[:, None])[:, 0]

    return sample


def nucleus_logits(tokens: Sequence[int], logprobs: Sequence[float], vocab: int, temperature: float, top_p: float,
                   banned: Sequence[int] = ()) -> torch.Tensor | None:
    """Next-token logits [vocab] on which `nucleus_sampler(temperature, top_p)` (with the `banned` ids
    set to −∞) keeps the same tokens, with the same weights, as on the model's full logits, made from the top
    log-probabilities alone (`tokens`, `logprobs`: the log-softmax at T = 1); None when they do not determine that.

    The kept set is the shortest run of most likely tokens whose tempered mass p_i^{1/T} / Z reaches top_p. Of Z only
    the top tokens' part S is known; the rest U, over tokens each at most p_min (the smallest top probability) and
    together holding the remaining mass r (less any banned ones), lies in [0, r·p_min^{1/T−1}] for T ≤ 1 and in
    [r·p_min^{1/T−1}, n·(r/n)^{1/T}] for T > 1 (n tokens outside the top). The draw is determined when the kept set is
    the same for every Z in that range and lies inside the top; the tokens outside get U spread evenly. T = 0: the
    most likely allowed token."""
    banned_set = set(banned)
    top = torch.tensor(logprobs, dtype=torch.float64)
    ids = torch.tensor(list(tokens), dtype=torch.long)
    allowed = torch.tensor([t not in banned_set for t in tokens], dtype=torch.bool)
    logits = torch.full((vocab,), float("-inf"))
    if not bool(allowed.any()):
        return None
    logits[ids[allowed]] = top[allowed].float()
    if temperature == 0:
        return logits
    p_min = float(top.exp().min())
    hidden_banned = len(banned_set - set(tokens))
    outside = vocab - len(tokens) - hidden_banned
    rest_hi = max(0.0, 1.0 - float(top.exp().sum())) if outside > 0 else 0.0
    rest_lo = max(0.0, rest_hi - hidden_banned * p_min)
    power = 1.0 / temperature
    tempered = (top[allowed] * power).exp().sort(descending=True).values
    known = float(tempered.sum())
    if power >= 1:
        low, high = 0.0, rest_hi * p_min ** (power - 1)
    else:
        low, high = rest_lo * p_min ** (power - 1), outside * (rest_hi / outside) ** power if outside else 0.0
    before = torch.cat([tempered.cumsum(0) - tempered, tempered.new_tensor([known])])  # mass ahead of each token

    def kept(total: float) -> int:
        return int((before < top_p * total).sum())

    if kept(known + low) != kept(known + high) or kept(known + high) > len(tempered):
        return None
    spread = (low + high) / 2
    if spread > 0:
        mask = torch.ones(vocab, dtype=torch.bool)
        mask[ids] = False
        mask[list(banned_set)] = False
        logits[mask] = temperature * torch.log(torch.tensor(spread / outside)).float()
    return logits
