"""A tiny Qwen3-architecture model and tokenizer built locally: no hub, seconds on a CPU.

CPU smoke runs and tests of the evaluation and the trainer adapters need a real causal
LM that `from_pretrained` can load. This builds one from scratch: a byte-level BPE
tokenizer trained on a few texts, a chat template in Qwen's format, and a randomly
initialised ``Qwen3ForCausalLM`` of ~100k parameters. It generates noise, which is the
point: the pipeline runs and the numbers are computed, the scores are ~0.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

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
        >>> from advbudget.tiny import build_tiny_model
        >>> path = build_tiny_model(tempfile.mkdtemp())
        >>> model = AutoModelForCausalLM.from_pretrained(path)
        >>> type(model).__name__, AutoTokenizer.from_pretrained(path).eos_token
        ('Qwen3ForCausalLM', '<|im_end|>')
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

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

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    Qwen3ForCausalLM(config).save_pretrained(output)
    return output
