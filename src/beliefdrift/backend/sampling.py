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


def _most_likely(probs: torch.Tensor, top_p: float, candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities [B, K] in descending order and their token ids, K large enough that every row's first
    K hold `top_p` of its mass: the top `candidates` where that holds (checked on the host, so on the CPU
    only), else the whole vocabulary."""
    if probs.is_cpu:
        top, order = probs.topk(min(candidates, probs.shape[-1]), -1)
        if not bool((top.sum(-1) < top_p).any()):
            return top, order
    return probs.sort(-1, descending=True)


def _nucleus_draw(logits: torch.Tensor, temperature: float, top_p: float, uniforms: Callable[[int], torch.Tensor],
                  most_likely: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """One token id per row of logits [B, V]: `inverse_cdf` over softmax(logits / T) cut to its nucleus (the most
    likely tokens, `most_likely`'s order, until their mass reaches top_p) at the `uniforms` [B, 1] of `uniforms(B)`;
    T = 0: the most likely token."""
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, -1)
    if top_p == 1:
        return inverse_cdf(probs, uniforms(len(probs)))[:, 0]
    top, order = most_likely(probs)
    keep = (top.cumsum(-1) - top) < top_p  # the most likely token is always kept
    return order.gather(-1, inverse_cdf(top * keep, uniforms(len(probs))))[:, 0]


class NucleusSampler:
    """Draws one token per row of logits [B, V] from softmax(logits / T) restricted to the smallest set of most
    likely tokens whose probability reaches `top_p` (T = 0: greedy); consecutive blocks of rows draw from their own
    generator (`streams`: (rows, generator), rows None for all of them).

    Called on logits it draws on their device, so only the [B] token ids leave it. On the CPU a block draws from its
    generator and searches the nucleus among the top `candidates` tokens when they hold `top_p` of the mass (then it
    lies inside them), else in the fully sorted vocabulary. On another device a block draws from a generator there,
    seeded by one draw from its generator on first use, and always sorts the vocabulary (cheaper there than asking
    the host whether the candidates suffice).

    Drawn up front instead (`uniforms`, then `draw`), every block's uniforms of all steps come from its generator at
    once, in the order the calls draw them (so on the CPU the same tokens), and a step reads nothing back to the host:
    what a static decoding step needs."""

    def __init__(self, temperature: float, top_p: float, streams: Sequence[tuple[int | None, torch.Generator]],
                 candidates: int = 256):
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
        self.temperature, self.top_p, self.candidates = temperature, top_p, candidates
        self.streams = list(streams)
        self._on_device: dict[tuple[int, torch.device], torch.Generator] = {}

    @classmethod
    def in_blocks(cls, samplers: Sequence[NucleusSampler], rows: int) -> NucleusSampler:
        """One sampler whose consecutive blocks of `rows` rows each draw as one of `samplers` (of one temperature,
        top_p and candidate count) would."""
        first = samplers[0]
        if any((s.temperature, s.top_p, s.candidates) != (first.temperature, first.top_p, first.candidates)
               for s in samplers):
            raise ValueError("samplers drawn in blocks need one temperature, top_p and candidate count")
        streams = [(rows, generator) for s in samplers for _, generator in s.streams]
        return cls(first.temperature, first.top_p, streams, first.candidates)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        blocks = self._blocks(len(logits))
        drawn = [self._call_block(i, part) for i, part in enumerate(logits.split(blocks))]
        return drawn[0] if len(drawn) == 1 else torch.cat(drawn)

    def uniforms(self, steps: int, rows: int, device: torch.device) -> torch.Tensor:
        """The uniforms [steps, rows, 1] (float64, on `device`) of `steps` calls on `rows` rows: each block's
        [steps, size] drawn now from its generator (none at T = 0, which draws nothing)."""
        if self.temperature == 0:
            return torch.zeros(steps, rows, 1, dtype=torch.float64, device=device)
        drawn = [torch.rand(steps, size, 1, generator=g, dtype=torch.float64)
                 for size, (_, g) in zip(self._blocks(rows), self.streams, strict=True)]
        return torch.cat(drawn, 1).to(device)

    def draw(self, logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """One token id per row of logits [B, V] at `uniforms` [B, 1] (a step of `uniforms`): the nucleus searched in
        the sorted vocabulary, nothing read back to the host."""
        return _nucleus_draw(logits, self.temperature, self.top_p, lambda _: uniforms,
                             lambda probs: probs.sort(-1, descending=True))

    def _blocks(self, rows: int) -> list[int]:
        sizes = [rows if size is None else size for size, _ in self.streams]
        if sum(sizes) != rows:
            raise ValueError(f"the sampler's blocks hold {sum(sizes)} rows, not {rows}")
        return sizes

    def _call_block(self, block: int, logits: torch.Tensor) -> torch.Tensor:
        generator = self._generator(block, logits.device)

        def uniforms(rows: int) -> torch.Tensor:
            return torch.rand(rows, 1, generator=generator, dtype=torch.float64, device=logits.device)

        return _nucleus_draw(logits, self.temperature, self.top_p, uniforms,
                             lambda probs: _most_likely(probs, self.top_p, self.candidates))

    def _generator(self, block: int, device: torch.device) -> torch.Generator:
        generator = self.streams[block][1]
        if device == generator.device:
            return generator
        if (block, device) not in self._on_device:
            seed = int(torch.randint(2**63 - 1, (), generator=generator))
            self._on_device[block, device] = torch.Generator(device).manual_seed(seed)
        return self._on_device[block, device]


def nucleus_sampler(temperature: float, top_p: float, generator: torch.Generator,
                    candidates: int = 256) -> NucleusSampler:
    """A `NucleusSampler` drawing every row from `generator`."""
    return NucleusSampler(temperature, top_p, [(None, generator)], candidates)


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
