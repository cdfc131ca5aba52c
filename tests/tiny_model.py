"""A tiny randomly initialised chat model with a byte-level tokenizer, built offline for fast tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GptOssConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    Olmo2Config,
    Olmo3Config,
    Phi3Config,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from beliefdrift.backend import TransformersModel
from beliefdrift.data import MCQuestion

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_tokenizer(chat_template: str | None = CHATML) -> PreTrainedTokenizerFast:
    """Every byte is one token (no merges), plus ChatML special tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    tokenizer.chat_template = chat_template
    return tokenizer


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """2 layers, 4 query heads over 2 KV heads (GQA), weights large enough that θ depends on history."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).eval()


WINDOW = 24  # sliding window of the families that have one: shorter than every test prompt
_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=4096, initializer_range=0.3, tie_word_embeddings=False, pad_token_id=0,
              bos_token_id=1, eos_token_id=2)
_LOCAL_GLOBAL = ["sliding_attention", "full_attention"]
_GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW, layer_types=_LOCAL_GLOBAL)

#: Tiny random configs of the architecture families users run (one line per family), by vocabulary size.
#: Sliding windows are shorter than the prompt; Gemma-2 soft-caps its attention logits.
FAMILIES: dict[str, Callable[[int], PretrainedConfig]] = {
    "llama": lambda v: LlamaConfig(vocab_size=v, **_SHAPE),
    "mistral": lambda v: MistralConfig(vocab_size=v, sliding_window=WINDOW, **_SHAPE),
    "qwen2": lambda v: Qwen2Config(vocab_size=v, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                                   **_SHAPE),
    "qwen3": lambda v: Qwen3Config(vocab_size=v, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                                   head_dim=16, **_SHAPE),
    "gemma2": lambda v: Gemma2Config(vocab_size=v, attn_logit_softcapping=5.0, final_logit_softcapping=10.0, **_GEMMA,
                                     **_SHAPE),
    "gemma3": lambda v: Gemma3TextConfig(vocab_size=v, **_GEMMA, **_SHAPE),
    "olmo2": lambda v: Olmo2Config(vocab_size=v, **_SHAPE),
    "olmo3": lambda v: Olmo3Config(vocab_size=v, sliding_window=WINDOW, layer_types=_LOCAL_GLOBAL, **_SHAPE),
    "phi3": lambda v: Phi3Config(vocab_size=v, sliding_window=WINDOW, **_SHAPE),
    # attention sinks: served by the per-path cache, not the shared prefix
    "gpt-oss": lambda v: GptOssConfig(vocab_size=v, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                      sliding_window=WINDOW, layer_types=_LOCAL_GLOBAL,
                                      **{**_SHAPE, "intermediate_size": 64}),
}


def tiny_family_lm(family: str, seed: int = 0, **load: str) -> TransformersModel:
    """A tiny random model of `family` with the byte tokenizer (`load`: e.g. attn_implementation)."""
    tokenizer = byte_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(FAMILIES[family](len(tokenizer)), **load).eval()
    return TransformersModel(model, tokenizer, family)


def save_tiny_model(directory: Path, seed: int = 0, chat_template: str | None = CHATML) -> Path:
    """Write a loadable model directory (config, safetensors, tokenizer) and return it."""
    tokenizer = byte_tokenizer(chat_template)
    tiny_llama(len(tokenizer), seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


SKY_QUESTION = MCQuestion(
    id="q-sky",
    stem="What color is the sky on a clear day?",
    choices=("green", "blue", "red", "black"),
    labels=("A", "B", "C", "D"),
    answer="B",
    source="test",
)


def plain_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Last-position logits of one uncached, unpadded, unbatched forward pass over `ids`."""
    with torch.no_grad():
        return model(torch.tensor([ids], device=model.get_input_embeddings().weight.device)).logits[0, -1]
