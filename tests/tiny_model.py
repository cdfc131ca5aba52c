"""A tiny randomly initialised chat model with a byte-level tokenizer, built offline for fast tests."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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
