"""Answer-label token ids, resolved in the context where the model will emit them.

`encode("A")` is not what a model sees after `"assistant\\n"` or `"Answer:"`: BPE tokenizers merge a
leading space into the label, SentencePiece adds a word-start marker, and a delimiter may merge with the
next label. So we tokenize the context followed by a sample answer list (`"A\\nB\\nC\\nA\\n"`) and read the
ids off; the list must split into one token per label plus identical delimiter tokens at every position.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase


class AnswerTokenError(ValueError):
    """A label or delimiter does not tokenize as one stable unit in context."""


@dataclass(frozen=True)
class AnswerTokens:
    """A prompt ready for constrained answering.

    `prompt_ids` is the context as the model consumes it (its last characters may have been absorbed into
    the label tokens, e.g. `"Answer:"` + `" A"`); `label_ids[i]` is the single token of label i;
    `delimiter_ids` the tokens fed after every answer.
    """

    prompt_ids: tuple[int, ...]
    label_ids: tuple[int, ...]
    delimiter_ids: tuple[int, ...]

    def answer_ids(self, label_index: int) -> tuple[int, ...]:
        """Tokens that append one answer (label + delimiter) to the context."""
        return (self.label_ids[label_index], *self.delimiter_ids)

    @property
    def step_length(self) -> int:
        return 1 + len(self.delimiter_ids)


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _tokenizer_name(tokenizer: PreTrainedTokenizerBase) -> str:
    return f"{type(tokenizer).__name__}({tokenizer.name_or_path or 'unnamed'})"


def _split_context(full: list[int], context_ids: list[int]) -> int:
    """Length of the longest common token prefix of `full` and `context_ids`."""
    shared = 0
    while shared < min(len(full), len(context_ids)) and full[shared] == context_ids[shared]:
        shared += 1
    return shared


def resolve_single_answer(
    tokenizer: PreTrainedTokenizerBase, context: str, labels: tuple[str, ...] | list[str]
) -> AnswerTokens:
    """Label ids for one answer right after `context` (direct query): `encode(context + L)` must end in
    one token per label after a prompt shared by all labels. No delimiter."""
    context_ids = _encode(tokenizer, context)
    encodings = [_encode(tokenizer, context + label) for label in labels]
    shared = min(_split_context(ids, context_ids) for ids in encodings)
    for label, ids in zip(labels, encodings, strict=True):
        if len(ids) != shared + 1 or ids[:shared] != encodings[0][:shared]:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: label {label!r} is not a single token after {context[-20:]!r} "
                f"(tokens {[tokenizer.decode([t]) for t in ids[shared:]]})"
            )
    label_ids = [ids[shared] for ids in encodings]
    if len(set(label_ids)) != len(label_ids):
        raise AnswerTokenError(f"{_tokenizer_name(tokenizer)}: labels {list(labels)} share a token")
    return AnswerTokens(tuple(encodings[0][:shared]), tuple(label_ids), ())


def resolve_answer_tokens(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    labels: tuple[str, ...] | list[str],
    delimiter: str = "\n",
) -> AnswerTokens:
    """Ids for a list of answers after `context`: each label must be one token right after the context,
    and `context + L1 d L2 d … Lk d L1 d` must tokenize as exactly those label tokens with the same
    delimiter tokens after each. Raises `AnswerTokenError` naming the tokenizer and label otherwise."""
    labels = list(labels)
    if not delimiter:
        raise ValueError("an answer list needs a non-empty delimiter")
    first = resolve_single_answer(tokenizer, context, labels)
    prompt = list(first.prompt_ids)
    delimiter_ids = _encode(tokenizer, context + labels[0] + delimiter)[len(prompt) + 1 :]
    sequence = [*range(len(labels)), 0]
    full = _encode(tokenizer, context + "".join(labels[i] + delimiter for i in sequence))
    if not delimiter_ids or full[: len(prompt)] != prompt:
        raise AnswerTokenError(
            f"{_tokenizer_name(tokenizer)}: delimiter {delimiter!r} merges with label {labels[0]!r} or the context"
        )
    position = len(prompt)
    for i in sequence:
        step = full[position : position + 1 + len(delimiter_ids)]
        if step[:1] != [first.label_ids[i]]:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: label {labels[i]!r} tokenizes differently after a delimiter "
                f"{delimiter!r} than at the start of the answer list"
            )
        if step[1:] != delimiter_ids:
            raise AnswerTokenError(
                f"{_tokenizer_name(tokenizer)}: delimiter {delimiter!r} after label {labels[i]!r} tokenizes as "
                f"{[tokenizer.decode([t]) for t in step[1:]]}, not as after {labels[0]!r}"
            )
        position += len(step)
    if position != len(full):
        raise AnswerTokenError(f"{_tokenizer_name(tokenizer)}: the answer list {labels} does not tokenize per label")
    return AnswerTokens(first.prompt_ids, first.label_ids, tuple(delimiter_ids))
