"""R rollouts of thought–answer pairs per question, decoded in one batch on a shared prompt cache.

The prompt is prefilled once (`PromptCache`, the model's `Rollouts`): on a local model its keys/values are shared
by every rollout (`backend.path_cache`) and each rollout caches only its own suffix. The suffix starts with the prompt's
last token and the rollout's reasoning seeds (left-padded to a common length, the padding hidden from
attention), then all rollouts advance one sampled token per forward pass (`cot/decoding.py`: on growing caches, or as
static steps a CUDA graph replays). A rollout stops after N pairs (N-th `</ans>`), at an end-of-sequence token, or
after `max_new_tokens` generated tokens; finished rollouts are fed a pad token (static steps: what they draw) until
the batch is done and everything they "generate" then is ignored.
Per step, only the R sampled token ids leave the model's device; the text is detokenized incrementally.

ψ(R_n) needs the last hidden state of every generated token. It is collected while decoding, for free:
the state of token t is the one computed when t is fed back as input (the step after it was sampled),
so one extra forward pass runs after the last rollout finishes. Seeds and the prompt get no states.
The states stay on the device until the batch is done and are copied to the host once.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from beliefdrift.backend.model import LanguageModel
from beliefdrift.backend.sampling import Sampler
from beliefdrift.backend.sampling import nucleus_sampler as nucleus_sampler  # the sampler rollouts are drawn with
from beliefdrift.cot.decoding import READ_AHEAD, decode, static_decoding
from beliefdrift.cot.parser import PAIR_SEPARATOR, Pair, PairParser, ParseResult, parse_pairs, render_pair
from beliefdrift.errors import UserError

ANSWER_OPEN = re.compile("<[aA][nN][sS]>")  # exactly the strings that lower-case to "<ans>"


@dataclass(frozen=True)
class DecodeConfig:
    """When a rollout stops: after `num_pairs` pairs or `max_new_tokens` tokens (or at EOS, free mode only), and
    the (temperature, top_p) of the sampler, which decide how many log-probabilities a served model must return.

    `guided` writes the pair tags for the model: `<sol>` opens every pair, `\\n<ans>` follows the model's
    `</sol>` (or is forced after `max_solution_tokens` solution tokens, with the `</sol>`), `</ans>` is
    forced once the answer line ends (a newline after some text) or after `max_answer_tokens`, and
    end-of-sequence is suppressed until N pairs are done. The model still writes every solution and answer.
    """

    num_pairs: int
    max_new_tokens: int
    guided: bool = False
    max_solution_tokens: int = 256
    max_answer_tokens: int = 24
    nucleus: tuple[float, float] = (1.0, 1.0)  # the sampler's (temperature, top_p): a served model's needs them

    def __post_init__(self) -> None:
        if min(self.num_pairs, self.max_new_tokens, self.max_solution_tokens, self.max_answer_tokens) < 1:
            raise ValueError(f"pair counts and token limits must be positive, got {self}")


class PromptCache:
    """A prompt prefilled once. All but its last token form the shared prefix; the last token is fed with
    each rollout's suffix, so the first decoding step yields every rollout's next-token logits."""

    def __init__(self, lm: LanguageModel, prompt_ids: Sequence[int]):
        if len(prompt_ids) < 2:
            raise ValueError("a prompt needs at least two tokens")
        self.lm = lm
        self.prompt_ids = tuple(prompt_ids)
        self.paths = lm.rollouts(self.prompt_ids[:-1])

    @classmethod
    def from_text(cls, lm: LanguageModel, context: str) -> PromptCache:
        return cls(lm, lm.tokenizer(context, add_special_tokens=False)["input_ids"])


@dataclass
class Rollout:
    """One generated sequence of pairs after the prompt and its seeds.

    `token_ids` are the generated tokens, tags written by guided decoding included (`forced` of them) and
    an end-of-sequence token excluded; `parse` parses their text; `pair_tokens[n]` is the [start, end)
    token range of generated pair n; `hidden[t]` the last hidden state of token t (when collected);
    `capped` counts the tags forced by a token cap; `stop` says why it ended: "pairs" (every pair written),
    "eos" (the model ended it) or "budget" (`max_new_tokens` spent).
    """

    seed_text: str
    token_ids: list[int]
    parse: ParseResult
    pair_tokens: list[tuple[int, int]]
    stop: str
    forced: int = 0
    capped: int = 0
    hidden: torch.Tensor | None = None

    @property
    def text(self) -> str:
        return self.parse.text

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return self.parse.pairs


def _ends_with_tag(text: str, tag: str) -> bool:
    """`text.rstrip().lower().endswith(tag)` for a lower-case ASCII tag, reading only the text's end (only
    characters that are ASCII letters or symbols lower-case to those)."""
    end = len(text)
    while end and text[end - 1].isspace():
        end -= 1
    return text[max(0, end - len(tag)) : end].lower() == tag


def _answer_so_far(text: str, start: int) -> str:
    """The text after the last `<ans>` (any case) that begins at or after `start`, which must hold one."""
    *_, last = ANSWER_OPEN.finditer(text, start)
    return text[last.end() :]


class _RolloutState:
    """One rollout while decoding: incremental detokenization into the pair parser (text is released only
    when it does not end inside a multi-byte character; `char_end[t]` is where token t's text ends), the
    queue of tag tokens guided decoding still has to write, and the stop reason.

    Each token decodes a short window, not the whole text, as the incremental detokenizers of
    text-generation-inference and vLLM do: `ids[prefix:]`, from where the previous release began; what its
    text adds to that of `ids[prefix:read]` (`read`: where the last release ended) is new. The tokens of
    context before the new text keep tokenizers that drop a leading space at the start of a decode right;
    releases never end inside a multi-byte character, so a window decodes as it does within the whole text.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: DecodeConfig, tags: dict[str, list[int]]) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.tags = tags
        self.ids: list[int] = []
        self.char_end: list[int] = []
        self.parser = PairParser()
        self.queue: list[int] = list(tags["open"]) if config.guided else []
        self.forced = self.capped = 0
        self.in_answer = False
        self.pairs_guided = 0
        self.phase_tokens = 0  # tokens the model wrote in the current solution or answer
        self.pair_start = 0  # where the current pair's text begins
        self.stop: str | None = None
        self._held = 0  # trailing tokens whose text is not released yet
        self._prefix = self._read = 0
        self._read_text = ""  # the text of ids[prefix:read]

    def _decode(self, start: int) -> str:
        return self.tokenizer.decode(self.ids[start:], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _release(self, text: str) -> None:
        """Feed the parser what `text`, the text of the window `ids[prefix:]`, adds to the released text."""
        self.parser.feed(text[len(self._read_text) :])
        self._prefix, self._read = self._read, len(self.ids)
        self._read_text = self._decode(self._prefix)

    def step(self, sampled: int, eos: set[int]) -> bool:
        """Append the next token (a queued tag token, else `sampled`); False when it ends the rollout unfed
        (end of sequence)."""
        forced = bool(self.queue)
        token = self.queue.pop(0) if forced else sampled
        if token in eos:
            self.stop = "eos"
            return False
        self.ids.append(token)
        text = self._decode(self._prefix)
        if text.endswith("\ufffd"):
            self._held += 1
        else:
            self._release(text)
            self._held = 0
        self.char_end.append(len(self.parser.text))
        self.forced += forced
        self.phase_tokens += not forced
        if self.parser.num_pairs >= self.config.num_pairs:
            self.stop = "pairs"
        elif len(self.ids) >= self.config.max_new_tokens:
            self.stop = "budget"
        elif self.config.guided and not self.queue:
            self._guide()
        return True

    def _enqueue(self, tag: str, answer: bool) -> None:
        if not answer:
            self.pair_start = len(self.parser.text)
        self.queue += self.tags[tag]
        self.in_answer, self.phase_tokens = answer, 0

    def _guide(self) -> None:
        """Queue the tags the format needs next, judging from the text written so far."""
        text = self.parser.text
        if self.parser.num_pairs > self.pairs_guided:
            self.pairs_guided = self.parser.num_pairs
            self._enqueue("next", answer=False)
        elif not self.in_answer:
            if _ends_with_tag(text, "</sol>"):
                self._enqueue("answer", answer=True)
            elif _ends_with_tag(text, "<ans>"):
                self.in_answer, self.phase_tokens = True, 0
            elif self.phase_tokens >= self.config.max_solution_tokens:
                self.capped += 1
                self._enqueue("close_solution", answer=True)
        else:
            if "\n" in _answer_so_far(text, self.pair_start).lstrip():
                self._enqueue("close_answer", answer=True)
            elif self.phase_tokens >= self.config.max_answer_tokens:
                self.capped += 1
                self._enqueue("close_answer", answer=True)

    def finish(self, hidden: torch.Tensor | None, seed_text: str) -> Rollout:
        """The rollout; `hidden` [≥ T, H] holds its tokens' last hidden states first (None: not collected)."""
        if self._held:
            self._release(self._decode(self._prefix))
            self.char_end[-self._held :] = [len(self.parser.text)] * self._held
        result = self.parser.finish()
        pair_tokens = [self.token_range(pair.span) for pair in result.pairs]
        states = hidden[: len(self.ids)] if hidden is not None and self.ids else None
        return Rollout(seed_text, self.ids, result, pair_tokens, str(self.stop), self.forced, self.capped, states)

    def token_range(self, span: tuple[int, int]) -> tuple[int, int]:
        """Tokens whose text overlaps characters [start, end): token t covers [char_end[t-1], char_end[t])."""
        start, end = span
        return bisect_right(self.char_end, start), bisect_left(self.char_end, end) + 1


GUIDE_TAGS = {
    "open": "<sol>",
    "answer": "\n<ans>",
    "close_solution": "</sol>\n<ans>",
    "close_answer": "</ans>",
    "next": PAIR_SEPARATOR + "<sol>",
}


def _end_of_sequence_ids(lm: LanguageModel) -> set[int]:
    ids = {lm.tokenizer.eos_token_id}
    config = lm.generation_config
    configured = config.eos_token_id if config is not None else None
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


@torch.no_grad()
def generate_rollouts(
    cache: PromptCache,
    seed_texts: Sequence[str],
    config: DecodeConfig,
    sampler: Sampler,
    collect_hidden: bool = True,
) -> list[Rollout]:
    """One rollout per entry of `seed_texts` (the text prefilled after the prompt; "" for none), decoded
    together on `cache`: one step of the model's `Rollouts` per generated token for the whole batch (a local model:
    one forward pass, as a static step where its `EngineSettings.decode_step` says so and `sampler` is a
    `NucleusSampler`, `cot/decoding.py`; a model behind an inference server: one request per running rollout, whose top
    log-probabilities determine the draw of `config.nucleus`, `backend.sampling.nucleus_logits`). A model whose
    rollouts give no hidden states (`LanguageModel.hidden_states`) cannot collect them."""
    lm = cache.lm
    tokenizer, device = lm.tokenizer, lm.device
    if collect_hidden and not lm.hidden_states:
        raise UserError(f"{lm.name} gives no hidden states to embed the pairs with (a model behind an inference "
                        "server); use --embedding sentence")
    eos = _end_of_sequence_ids(lm)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    tags = {name: tokenizer(text, add_special_tokens=False)["input_ids"] for name, text in GUIDE_TAGS.items()}
    firsts = [[cache.prompt_ids[-1], *tokenizer(t, add_special_tokens=False)["input_ids"]] for t in seed_texts]
    width = max(len(f) for f in firsts)
    padding = [width - len(f) for f in firsts]
    rollouts = cache.paths.select(torch.zeros(len(firsts), dtype=torch.long))
    # the first tokens, and every token generated after them unless the steps are static (their own cache)
    rollouts.reserve(width + (0 if static_decoding(rollouts) else config.max_new_tokens))
    banned = sorted(eos) if config.guided else []
    first = torch.tensor([[pad] * (width - len(f)) + f for f in firsts], device=device)
    logits, _ = rollouts.extend(first, torch.tensor(padding) if any(padding) else None,
                                nucleus=(*config.nucleus, banned))
    steps = decode(rollouts, logits, sampler, banned=banned, nucleus=config.nucleus, budget=config.max_new_tokens,
                   hidden=collect_hidden, dtype=lm.dtype, pad=pad, read_ahead=0 if config.guided else READ_AHEAD)
    states = [_RolloutState(tokenizer, config, tags) for _ in seed_texts]
    # Row r's state at pass t is that of its token t (rows are fed from the start until they stop).
    while True:
        tokens = steps.tokens()
        fed = [r for r, state in enumerate(states) if state.stop is None and state.step(tokens[r], eos)]
        running = any(state.stop is None for state in states)
        if not fed or not (running or collect_hidden):
            break
        steps.advance({r: states[r].ids[-1] for r in fed}, [r for r in fed if states[r].stop is None])
        if not running:
            break
    hidden = steps.hidden_states()
    return [state.finish(None if hidden is None else hidden[r], seed_texts[r]) for r, state in enumerate(states)]


def seed_pair(rollout: Rollout) -> Pair:
    """The first pair of a single-pair (direct chain-of-thought) rollout; a rollout cut off before its
    `</ans>` is closed and parsed tolerantly, so every rollout yields one (possibly malformed) pair."""
    return rollout.pairs[0] if rollout.pairs else parse_pairs(rollout.text + "</ans>").pairs[0]


def render_seeds(pairs: Sequence[Pair]) -> str:
    """Seed pairs as prefilled text: well-formed pairs, each followed by the blank-line separator."""
    return "".join(render_pair(p.solution, p.answer or "") + PAIR_SEPARATOR for p in pairs)
