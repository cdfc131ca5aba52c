"""How the rollouts' decoding steps run, one token per rollout per step, for the host loop of `cot.generation`: on
the rollouts' growing caches (`GrowingDecode`, one `Rollouts.extend` per step), or as static steps, the step a CUDA
graph captures (`StaticDecode`, where the model's `EngineSettings.decode_step` says so).

Both hand the host each step's drawn tokens (`tokens`) and feed what the host decided (`advance`: the drawn token, or
a tag guided decoding writes), and give the hidden states of the fed tokens at the end (`hidden_states`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeGuard

import torch

from beliefdrift.backend.model import Rollouts, StaticRollouts
from beliefdrift.backend.sampling import NucleusSampler, Sampler
from beliefdrift.engine.resampling import CAPTURE_WARM_UP, ReplayedStep

#: Steps a static decode of free format (no tags to write) runs ahead of the host, which reads their tokens while
#: the device runs the next ones; at most twice as many run past a batch's last token.
READ_AHEAD = 8


class Decode(Protocol):
    """The decoding steps of one batch of rollouts after their first pass."""

    def tokens(self) -> list[int]:
        """Every rollout's token drawn at this step."""

    def advance(self, feed: Mapping[int, int], active: Sequence[int]) -> None:
        """Feed token `feed[r]` to each rollout r it names (the others' are ignored from now on) in one pass; the
        rollouts in `active` still need their next token."""

    def hidden_states(self) -> torch.Tensor | None:
        """The last hidden states [R, passes, H] (float32, on the host) of the tokens fed, None without any."""


def decode(rollouts: Rollouts, logits: torch.Tensor, sampler: Sampler, *, banned: Sequence[int],
           nucleus: tuple[float, float], budget: int, hidden: bool, dtype: torch.dtype, pad: int,
           read_ahead: int) -> Decode:
    """The decoding steps of `rollouts` after their first pass (its next-token `logits` [R, V]), at most `budget`
    passes, `banned` ids never drawn, `hidden` states collected (in `dtype`), `pad` fed to the rollouts that have
    stopped: static where the rollouts say so (`StaticRollouts.decode_step`) and can, and the sampler draws up front
    (a `NucleusSampler`), `read_ahead` steps ahead of the host where every rollout is fed the token it drew (free
    decoding; 0: the host reads every step's tokens before the next step runs); else growing."""
    if static_decoding(rollouts) and isinstance(sampler, NucleusSampler):
        advance = rollouts.static_steps(budget, hidden)
        if advance is not None:
            return StaticDecode(advance, logits, sampler, banned, budget,
                                (rollouts.hidden_size, dtype) if hidden else None, rollouts.decode_step.capture,
                                read_ahead)
    return GrowingDecode(rollouts, logits, sampler, banned=banned, nucleus=nucleus, budget=budget, hidden=hidden,
                         pad=pad)


def static_decoding(rollouts: Rollouts) -> TypeGuard[StaticRollouts]:
    """Whether `rollouts` run their decoding steps as static steps."""
    return isinstance(rollouts, StaticRollouts) and rollouts.decode_step.static


class GrowingDecode:
    """One `Rollouts.extend` per step on the rollouts' growing caches (a model behind a server's too), the tokens drawn
    from each step's logits: on the CPU by the sampler per step (the tokens every stored run drew), elsewhere a
    `NucleusSampler`'s uniforms of every step drawn up front (`NucleusSampler.uniforms`), so a GPU draws what its
    static steps draw and starts no generator per step."""

    def __init__(self, rollouts: Rollouts, logits: torch.Tensor, sampler: Sampler, *, banned: Sequence[int],
                 nucleus: tuple[float, float], budget: int, hidden: bool, pad: int):
        self.rollouts = rollouts
        self.pad = pad
        self.logits = logits
        self.nucleus = (*nucleus, banned)
        self.budget = budget
        self.collect = hidden
        self.banned = torch.tensor(banned, device=logits.device) if banned else None
        self.draw: Callable[[torch.Tensor, int], torch.Tensor] = lambda logits, _: sampler(logits)
        if isinstance(sampler, NucleusSampler) and logits.device.type != "cpu":
            uniforms = sampler.uniforms(budget + 1, len(logits), logits.device)
            self.draw = lambda logits, step: sampler.draw(logits, uniforms[step])
        self.passes = 0
        self.hidden: torch.Tensor | None = None  # [R, budget, H] on the device, filled up to `passes`

    def tokens(self) -> list[int]:
        if self.banned is not None:
            self.logits[:, self.banned] = float("-inf")
        return self.draw(self.logits, self.passes).tolist()

    def advance(self, feed: Mapping[int, int], active: Sequence[int]) -> None:
        ids = torch.tensor([feed.get(r, self.pad) for r in range(len(self.logits))], device=self.logits.device)
        self.logits, hidden = self.rollouts.extend(ids[:, None], nucleus=self.nucleus, hidden=self.collect,
                                                   active=list(active))
        if hidden is not None:
            if self.hidden is None:
                self.hidden = hidden.new_empty((len(hidden), self.budget, hidden.shape[-1]))
            self.hidden[:, self.passes] = hidden
        self.passes += 1

    def hidden_states(self) -> torch.Tensor | None:
        return None if self.hidden is None else self.hidden[:, : self.passes].to("cpu", torch.float32, copy=True)


class StaticDecode:
    """The decoding steps of R rollouts as one step function over tensors allocated once, for at most `budget` passes:
    the token each pass feeds [R], the tokens drawn [R, budget + 1] (column 0 from the first pass's logits), the
    hidden states of the fed tokens [R, budget, H], the uniforms of every draw [budget + 1, R, 1] (drawn up front from
    the sampler's generators), the step count n (on the device) and, inside `advance`
    (`StaticRollouts.static_steps`), the token ids, positions and static suffix cache of the passes. `step()` runs the
    pass of the fed tokens, writes their hidden states, draws the next tokens (`NucleusSampler.draw`, `banned` ids
    never) and feeds them, all on the device and in place: it reads nothing back to the host, branches on no value,
    and runs the same Python at every step, so one recorded step (a CUDA graph, with `capture` on a CUDA device)
    replays them all.

    The host reads the drawn tokens between steps (`tokens`), where it decides when a rollout stops and which tag
    guided decoding writes instead of the drawn token (written into the fed tokens before the step runs). Guided
    decoding therefore reads every step; free decoding, which feeds what it draws, runs `read_ahead` steps ahead and
    reads their tokens while the next ones run. Its tokens and hidden states are those of `GrowingDecode` with the
    same sampler, up to the static suffix's rounding (its empty slots are attended with weight zero)."""

    def __init__(self, advance: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]],
                 logits: torch.Tensor, sampler: NucleusSampler, banned: Sequence[int], budget: int,
                 hidden: tuple[int, torch.dtype] | None, capture: bool, read_ahead: int = 0):
        rows, device = len(logits), logits.device
        self.advance_pass = advance
        self.sampler = sampler
        self.budget = budget
        self.uniforms = sampler.uniforms(budget + 1, rows, device)
        self.banned: torch.Tensor | None = None
        if banned:
            self.banned = torch.zeros(logits.shape[-1], dtype=torch.bool, device=device)
            self.banned[list(banned)] = True
        self.drawn = torch.zeros(rows, budget + 1, dtype=torch.long, device=device)
        self.hidden = None if hidden is None else torch.zeros(rows, budget, hidden[0], dtype=hidden[1], device=device)
        self.count = torch.zeros(1, dtype=torch.long, device=device)
        self.drawn[:, 0] = self.draw(logits, self.count)
        self.feed = self.drawn[:, 0].clone()
        self.lead = read_ahead
        self.launched = self.passes = 0  # steps run; steps the host has fed
        self._columns: list[list[int]] = []  # drawn tokens on the host, not yet handed out
        self._column: list[int] = []  # the tokens `tokens` handed out last
        self._step = ReplayedStep(self.step, capture and device.type == "cuda" and budget > CAPTURE_WARM_UP)

    def step(self) -> None:
        n = self.count
        logits, hidden = self.advance_pass(self.feed)
        if self.hidden is not None and hidden is not None:
            self.hidden.index_copy_(1, n, hidden[:, None].to(self.hidden.dtype))
        token = self.draw(logits, n + 1)
        self.drawn.index_copy_(1, n + 1, token[:, None])
        self.feed.copy_(token)
        self.count += 1

    def draw(self, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The tokens [R] drawn from next-token logits [R, V] with the uniforms of draw `index` [1]."""
        if self.banned is not None:
            logits = logits.masked_fill(self.banned, float("-inf"))
        return self.sampler.draw(logits, self.uniforms.index_select(0, index)[0])

    def tokens(self) -> list[int]:
        if not self._columns:
            self._columns = self.drawn[:, self.passes : self.launched + 1].T.tolist()
            for _ in range(min(self.launched + self.lead, self.budget) - self.launched):
                self._run()
        self._column = self._columns.pop(0)
        return self._column

    def advance(self, feed: Mapping[int, int], active: Sequence[int]) -> None:
        changed = {r: token for r, token in feed.items() if token != self._column[r]}
        if changed:
            if self.launched > self.passes:
                raise RuntimeError("a rollout is fed another token than it drew after its step ran (read_ahead is "
                                   "for free decoding only)")
            self.feed.copy_(torch.tensor([changed.get(r, t) for r, t in enumerate(self._column)]))
        if self.launched == self.passes:
            self._run()
        self.passes += 1

    def hidden_states(self) -> torch.Tensor | None:
        if self.hidden is None or not self.passes:
            return None
        return self.hidden[:, : self.passes].to("cpu", torch.float32, copy=True)

    def _run(self) -> None:
        self._step()
        self.launched += 1
