"""A character-level Hugging Face tokenizer, built locally (no downloads).

One token per character: digits, the few operators the tasks use, and a space.
It is a real `PreTrainedTokenizerFast`, so `save_pretrained`/`from_pretrained`,
batching and padding work as with any hub tokenizer.
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]
CHARACTERS = list("0123456789") + list("+-*/=(),:|>") + [" "] + list("abcdefghijklmnopqrstuvwxyz")
N_UNUSED = 64 - len(SPECIAL_TOKENS) - len(CHARACTERS)   # pad the vocabulary to 64 ids


def _vocab() -> dict[str, int]:
    tokens = SPECIAL_TOKENS + CHARACTERS + [f"<unused{i}>" for i in range(N_UNUSED)]
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character tokenizer: `"12+34="` -> `<bos> 1 2 + 3 4 =`."""
    vocab = _vocab()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # One token per character, spaces kept (the Whitespace pre-tokenizer would drop them).
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # join characters back without spaces
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    unused = [t for t in vocab if t.startswith("<unused")]
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK,
        additional_special_tokens=unused,
        padding_side="left",            # prompts are left-padded for generation
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer.

    Uses `PreTrainedTokenizerFast` directly: `AutoTokenizer` on a Qwen2 model folder
    silently swaps in a byte-level BPE tokenizer in transformers 5.
    """
    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    if tok.pad_token_id is None or tok.eos_token_id is None:
        raise ValueError(f"tokenizer at {path} has no pad/eos token; rebuild it with build_tokenizer()")
    return tok
