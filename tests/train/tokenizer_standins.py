"""A gpt-oss-sized tokenizer built in code (no hub download) that counts its own pickles and unpickles."""

from __future__ import annotations

import os

from transformers import PreTrainedTokenizerFast

VOCAB = 201_088  # gpt-oss's o200k_harmony


class CountingTokenizer(PreTrainedTokenizerFast):
    """A fast tokenizer whose serializations (`dumps`) and loads (`loads`) are counted in each process."""

    dumps = 0
    loads = 0
    load_pids: list[int] = []

    def __getstate__(self):
        type(self).dumps += 1
        return self.__dict__.copy()

    def __setstate__(self, state):
        type(self).loads += 1
        type(self).load_pids.append(os.getpid())
        self.__dict__.update(state)


def large_vocab_tokenizer(vocab: int = VOCAB) -> CountingTokenizer:
    """A word-level tokenizer of `vocab` entries (t0 .. t{vocab-1}), split on whitespace."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return CountingTokenizer(tokenizer_object=tok, unk_token="t0")
