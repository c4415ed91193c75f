"""A tiny Qwen3-architecture model and tokenizer built locally: no hub, seconds on a CPU.

CPU smoke runs and tests of the evaluation and the trainer adapters need a real causal
LM that `from_pretrained` can load. This builds one from scratch: a byte-level BPE
tokenizer trained on a few texts, a chat template in Qwen's format, and a randomly
initialised ``Qwen3ForCausalLM`` of ~100k parameters. It generates noise, which is the
point: the pipeline runs and the numbers are computed, the scores are ~0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from advbudget.checks import int_at_least

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
DEFAULT_TEXTS = (
    "Solve the following math problem step by step. The last line of your response "
    "should be of the form Answer: $Answer (without quotes) where $Answer is the answer.",
    "What is 12 + 30? Let me think. 12 + 30 = 42. Answer: 42",
    'Remember to put your answer on its own line after "Answer:". 0 1 2 3 4 5 6 7 8 9 -',
)


def build_tiny_model(
    output_dir: str | Path,
    *,
    texts: Iterable[str] = DEFAULT_TEXTS,
    vocab_size: int = 400,
    hidden_size: int = 32,
    num_layers: int = 2,
    seed: int = 0,
) -> Path:
    """Write a tiny random Qwen3 model and its tokenizer to ``output_dir``; return the path.

    Examples:
        >>> import tempfile
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> from advbudget.lab.tiny import build_tiny_model
        >>> path = build_tiny_model(tempfile.mkdtemp())
        >>> model = AutoModelForCausalLM.from_pretrained(path)
        >>> type(model).__name__, AutoTokenizer.from_pretrained(path).eos_token
        ('Qwen3ForCausalLM', '<|im_end|>')
    """
    import torch
    from transformers import Qwen3ForCausalLM

    output = build_tiny_tokenizer(output_dir, texts=texts, vocab_size=vocab_size)
    tokenizer = _load_tokenizer(output)
    torch.manual_seed(seed)
    config = tiny_qwen3_config(tokenizer, hidden_size=hidden_size, num_layers=num_layers)
    Qwen3ForCausalLM(config).save_pretrained(output)
    return output


def build_tiny_checkpoint(
    output_dir: str | Path,
    *,
    texts: Iterable[str] = DEFAULT_TEXTS,
    vocab_size: int = 400,
    hidden_size: int = 32,
    num_layers: int = 2,
    seed: int = 0,
) -> Path:
    """:func:`build_tiny_model` without torch: the same tokenizer and configuration, and
    random weights (normal, std 0.02; norms 1) written with numpy as ``model.safetensors``
    in Hugging Face's Qwen3 layout. For JAX trainers that load Hugging Face checkpoints
    (tunix's ``create_model_from_safe_tensors``); returns the path.

    Examples:
        >>> import tempfile
        >>> from transformers import AutoModelForCausalLM
        >>> from advbudget.lab.tiny import build_tiny_checkpoint
        >>> path = build_tiny_checkpoint(tempfile.mkdtemp())
        >>> model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
        >>> type(model).__name__, info["missing_keys"], info["unexpected_keys"]
        ('Qwen3ForCausalLM', set(), set())
    """
    import numpy as np
    from safetensors.numpy import save_file

    output = build_tiny_tokenizer(output_dir, texts=texts, vocab_size=vocab_size)
    config = tiny_qwen3_config(
        _load_tokenizer(output), hidden_size=hidden_size, num_layers=num_layers
    )
    config.save_pretrained(output)
    rng = np.random.default_rng(seed)
    d, f, h = config.hidden_size, config.intermediate_size, config.head_dim
    q, kv = config.num_attention_heads * h, config.num_key_value_heads * h
    shapes = {"model.embed_tokens.weight": (config.vocab_size, d), "model.norm.weight": (d,)}
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}."
        shapes |= {
            layer + "self_attn.q_proj.weight": (q, d),
            layer + "self_attn.k_proj.weight": (kv, d),
            layer + "self_attn.v_proj.weight": (kv, d),
            layer + "self_attn.o_proj.weight": (d, q),
            layer + "self_attn.q_norm.weight": (h,),
            layer + "self_attn.k_norm.weight": (h,),
            layer + "mlp.gate_proj.weight": (f, d),
            layer + "mlp.up_proj.weight": (f, d),
            layer + "mlp.down_proj.weight": (d, f),
            layer + "input_layernorm.weight": (d,),
            layer + "post_attention_layernorm.weight": (d,),
        }
    tensors = {
        name: np.ones(shape, np.float32)
        if len(shape) == 1
        else rng.normal(0.0, 0.02, shape).astype(np.float32)
        for name, shape in shapes.items()
    }
    save_file(tensors, str(output / "model.safetensors"), metadata={"format": "pt"})
    return output


def build_tiny_tokenizer(
    output_dir: str | Path, *, texts: Iterable[str] = DEFAULT_TEXTS, vocab_size: int = 400
) -> Path:
    """Write :func:`build_tiny_model`'s tokenizer alone to ``output_dir`` (no torch: for
    JAX trainers, which build their own tiny model); return the path.

    Examples:
        >>> import tempfile
        >>> from transformers import AutoTokenizer
        >>> from advbudget.lab.tiny import build_tiny_tokenizer
        >>> tokenizer = AutoTokenizer.from_pretrained(build_tiny_tokenizer(tempfile.mkdtemp()))
        >>> tokenizer.eos_token, tokenizer.pad_token
        ('<|im_end|>', '<|endoftext|>')
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.save_pretrained(output)
    return output


def _load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tiny_qwen3_config(
    tokenizer: Any,
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_positions: int = 2048,
) -> Any:
    """A small ``Qwen3Config`` for ``tokenizer`` (its vocabulary, eos and pad ids).

    The MLP is twice the hidden size and the embeddings are tied, as in
    :func:`build_tiny_model`.

    Examples:
        >>> from advbudget.lab.tiny import tiny_qwen3_config, word_level_tokenizer
        >>> tokenizer = word_level_tokenizer(list("0123456789+=?"), words=["Answer:"])
        >>> config = tiny_qwen3_config(tokenizer, hidden_size=64)
        >>> config.vocab_size, config.head_dim, config.intermediate_size
        (17, 16, 128)
    """
    from transformers import Qwen3Config

    int_at_least("hidden_size", hidden_size, 1)
    if hidden_size % num_heads:
        raise ValueError(
            f"hidden_size: expected a multiple of num_heads = {num_heads}, got {hidden_size}"
        )
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads: expected a divisor of num_heads = {num_heads}, got {num_kv_heads}"
        )
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )


def word_level_tokenizer(symbols: Sequence[str], *, words: Sequence[str] = ()) -> Any:
    """A tokenizer whose tokens are ``words`` and single characters of ``symbols``.

    For tasks with a small alphabet (digits, operators): each listed word is one token,
    every other character one token, and decoding concatenates them. The special tokens
    are Qwen's (eos ``<|im_end|>``, pad ``<|endoftext|>``), with its chat template.

    Args:
        symbols: the task's characters (each a one-character str).
        words: multi-character tokens, matched before single characters (``"Answer:"``).

    A character outside the alphabet encodes as the pad token (``<|endoftext|>``).

    Raises:
        ValueError: a symbol is not one character.

    Examples:
        >>> from advbudget.lab.tiny import word_level_tokenizer
        >>> tokenizer = word_level_tokenizer(list("0123456789+=? "), words=["Answer:"])
        >>> ids = tokenizer("Answer: 46")["input_ids"]
        >>> len(ids), tokenizer.decode(ids)
        (4, 'Answer: 46')
    """
    import re

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    bad = [s for s in symbols if not isinstance(s, str) or len(s) != 1]
    if bad:
        raise ValueError(f"symbols: expected one-character strings, got {bad[:5]!r}")
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *words, *symbols):
        vocab.setdefault(token, len(vocab))
    # Longest words first, so "Answer:" is not split by a shorter word it starts with.
    alternatives = [re.escape(w) for w in sorted(words, key=len, reverse=True)] + ["."]
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[0]))
    model.pre_tokenizer = pre_tokenizers.Split(Regex("|".join(alternatives)), behavior="isolated")
    model.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=model,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
