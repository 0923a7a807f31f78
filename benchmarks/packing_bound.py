"""How many tokens shared-prefix packing can save on a dataset: the ceiling of its speedup.

    python benchmarks/packing_bound.py DATA_DIR [DATA_DIR ...]

Packing encodes a room snapshot's shared prompt prefix once instead of once per row; everything
after the first token where a snapshot's rows differ (the comment, per-comment context, the
assistant turns, tool results, loaded skill rules) is encoded per row as before. So the token
ratio ``tokens of the rows one by one / tokens of the packs`` bounds what packing alone can buy,
and an SFT speedup of S over the one-row-at-a-time recipe needs a per-token gain of S / ratio from
everything else (bf16, the LM head on trained positions only). Prints, per folder of ``hat
datagen`` rows, the mean row and trained tokens and the ratio for several pack limits
(``pack_max_rows``, ``pack_max_tokens``; "inf" = a whole snapshot in one pack), and the ceiling of
any exact sharing of prompt tokens within a snapshot: each distinct token prefix encoded once (a
token trie, as tree attention would encode it; prefixes cut before a row's first trained token).
"""

from __future__ import annotations

import argparse
import itertools
import json

from hat.models.transformers_backend import smollm2_gguf_path
from hat.train import load_rows
from hat.train.packing import EncodedRow, _first_trained, pack_rows
from hat.train.sft import encode_rows

LIMITS = ((16, 6144), (16, 8192), (16, None), (4, None))


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    return next((j for j in range(n) if a[j] != b[j]), n)


def trie_tokens(rows: list[EncodedRow]) -> int:
    """Tokens to encode when every distinct prefix within a packing group is encoded once."""
    groups: dict[str, list[EncodedRow]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    total = 0
    for members in groups.values():
        ordered = sorted(members, key=lambda r: r.input_ids)
        total += len(ordered[0].input_ids)
        for prev, row in itertools.pairwise(ordered):
            total += len(row.input_ids) - min(_common(prev.input_ids, row.input_ids), _first_trained(row))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", help="hat datagen output folders")
    parser.add_argument("--max-length", type=int, default=4096)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    for folder in args.data:
        encoded, _ = encode_rows(load_rows(folder), tokenizer, args.max_length)
        encoded = [e for e in encoded if e.n_trained]
        unpacked = sum(len(e.input_ids) for e in encoded)
        limits = {}
        for max_rows, max_tokens in LIMITS:
            packs = pack_rows(encoded, max_rows=max_rows, max_tokens=max_tokens or 10**12)
            packed = sum(p.n_tokens for p in packs)
            limits[f"rows<={max_rows},tokens<={max_tokens or 'inf'}"] = {
                "packed_tokens_per_row": round(packed / len(encoded), 1),
                "token_ratio": round(unpacked / packed, 3),
            }
        result = {
            "data": folder,
            "rows": len(encoded),
            "tokens_per_row": round(unpacked / len(encoded), 1),
            "trained_tokens_per_row": round(sum(e.n_trained for e in encoded) / len(encoded), 1),
            "limits": limits,
            "trie_token_ratio": round(unpacked / trie_tokens(encoded), 3),
        }
        print(json.dumps(result))


if __name__ == "__main__":
    main()
