"""A tiny random Llama written as a GGUF, for the llama.cpp tests (tests/ is on sys.path).

Byte-level BPE vocabulary of printable ASCII trained on a few sentences (ids 0 and 1 are
``<|im_start|>``/``<|im_end|>``; one token, ``abc…XYZ``, is longer than 32 bytes), 2 layers of
width 32, a ChatML template: llama.cpp loads and decodes it in milliseconds, and transformers
loads it too (``hf:<file>.gguf``), so both engines run the same weights.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

LONG_TOKEN = string.ascii_letters  # 52 bytes: one token of the tiny vocabulary

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_vocab() -> tuple[list[str], list[str]]:
    """Tokens (ids 0 and 1 are ``<|im_start|>``/``<|im_end|>``) and merges of a byte-level BPE over
    printable ASCII, so every generated token decodes to readable text."""
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers.models import BPE

    raw = Tokenizer(BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=240, special_tokens=["<|im_start|>", "<|im_end|>"])
    raw.train_from_iterator(["the host shows a red jacket and a blue bag", string.printable], trainer)
    model = json.loads(raw.to_str())["model"]
    tokens = [token for token, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
    return tokens, [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]


def write_tiny_gguf(path: Path) -> Path:
    import gguf
    import numpy as np

    tokens, merges = tiny_vocab()
    n_vocab, n_embd, n_ff, n_head, n_kv = len(tokens), 32, 64, 4, 2
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(512)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(2)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])  # 3: control
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    rng = np.random.default_rng(0)

    def weight(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)  # peaked logits: no ties

    kv = n_kv * n_embd // n_head
    writer.add_tensor("token_embd.weight", weight(n_vocab, n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, n_embd))
    for i in range(2):
        for name, shape in [("attn_q", (n_embd, n_embd)), ("attn_k", (kv, n_embd)), ("attn_v", (kv, n_embd))]:
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
