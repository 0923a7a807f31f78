"""How much of a trained LoRA adapter's delta falls in bf16's dead zone, layer kind by layer kind.

Under bf16 autocast PEFT adds the adapter's delta ``d`` to a base output ``b`` already rounded to
bf16, so ``round(b + d) = b`` wherever ``|d|`` is below half a bf16 step of ``b`` (reports/stage1b.md
§1, "Why bf16 lagged float32"). For a young adapter that is most outputs; this measures it for a
trained one, on the first rows of a datagen folder (float32 forward, each LoRA layer's base output
rounded as autocast would): the share of outputs in the dead zone and the slope of the delta the
bf16 sum shows on the exact delta (1 = all of it shows, on average).

    python benchmarks/lora_dead_zone.py --adapter /work/runs/stage1l/sft-hsa-s0 --data /work/runs/stage1l/data
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", type=Path, required=True, help="A PEFT adapter folder on SmolLM2.")
    parser.add_argument("--data", type=Path, required=True, help="A hat datagen folder.")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from peft import PeftModel

    from hat.train import load_rows
    from hat.train.sft import encode_rows, load_base

    model, tokenizer, _ = load_base("smollm2")
    model = PeftModel.from_pretrained(model, str(args.adapter), is_trainable=False)
    encoded, _ = encode_rows(load_rows(args.data)[: args.rows], tokenizer, 2048)
    stats: dict[str, list[float]] = {}

    def hook(kind: str) -> Any:
        def measure(module: Any, inputs: Any, _output: Any) -> None:
            x = inputs[0].float()
            base = module.base_layer(x).bfloat16().float()  # the base output as autocast rounds it
            name = module.active_adapters[0]
            delta = module.lora_B[name](module.lora_A[name](x)) * module.scaling[name]
            step = torch.pow(2.0, torch.floor(torch.log2(base.abs().clamp_min(1e-30))) - 7)  # one bf16 step
            shown = (base + delta).bfloat16().float() - base
            s = stats.setdefault(kind, [0.0, 0.0, 0.0, 0.0])
            s[0] += float((delta.abs() < step / 2).sum())
            s[1] += delta.numel()
            s[2] += float((shown * delta).sum())
            s[3] += float((delta * delta).sum())

        return measure

    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and isinstance(getattr(module, "base_layer", None), torch.nn.Linear):
            module.register_forward_hook(hook(name.rsplit(".", 1)[-1]))
    with torch.no_grad():
        for row in encoded:
            model(input_ids=torch.tensor([row.input_ids]))
    per_kind = {
        k: {"dead_zone_share": round(v[0] / v[1], 3), "slope_shown_on_exact": round(v[2] / v[3], 3)}
        for k, v in stats.items()
    }
    print(json.dumps({"adapter": str(args.adapter), "rows": len(encoded), "per_projection": per_kind}))


if __name__ == "__main__":
    main()
