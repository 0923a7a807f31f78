"""Shared-prefix packing: exact against the unpacked rows (loss and LoRA gradients), packs that
reconstruct their rows, bf16 autocast close to float32, and the packed trainer's exact resume and
atomic checkpoints. Tiny random Llama models only (seconds on CPU)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from hat.train import DatagenConfig, generate_dataset, load_rows
from hat.train.packing import IGNORE_INDEX, EncodedRow, Pack, pack_loss, pack_rows, row_group, unpacked_loss

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _lora_model(seed: int = 0) -> Any:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.3,
    )  # fmt: skip
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, init_lora_weights=False)
    return get_peft_model(LlamaForCausalLM(config), lora)


def _rows(n: int, prefix_len: int, seed: int, group: str = "g", train_first: bool = False) -> list[EncodedRow]:
    rng = random.Random(seed)
    prefix = [rng.randrange(1, 300) for _ in range(prefix_len)]
    rows = []
    for i in range(n):
        cont = [rng.randrange(1, 300) for _ in range(rng.randrange(4, 20))]
        start = 0 if train_first and i == 0 else 3  # row 0 may be trained from its first token on
        labels = [IGNORE_INDEX] * prefix_len + [t if j >= start else IGNORE_INDEX for j, t in enumerate(cont)]
        rows.append(EncodedRow(tuple(prefix + cont), tuple(labels), group))
    return rows


def _loss_and_grads(model: Any, fn: Any) -> tuple[float, dict[str, Any]]:
    model.zero_grad()
    loss, n = fn()
    (loss / n).backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    return float(loss.detach() / n), grads


@pytest.mark.parametrize("attention", ["prefix-cache", "block-mask"])
@pytest.mark.parametrize("train_first", [False, True])
def test_packed_loss_and_lora_gradients_equal_the_unpacked_rows(attention: str, train_first: bool) -> None:
    model = _lora_model()
    rows = _rows(5, 40, seed=1, train_first=train_first)
    (pack,) = pack_rows(rows, max_rows=8)
    assert len(pack.prefix) == 40 and pack.n_rows == 5
    ref_loss, ref_grads = _loss_and_grads(model, lambda: unpacked_loss(model, rows))
    loss, grads = _loss_and_grads(model, lambda: pack_loss(model, pack, attention=attention))
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for key, ref in ref_grads.items():
        assert ref.abs().max() > 0, key  # every LoRA matrix gets a gradient (through the prefix too)
        torch.testing.assert_close(grads[key], ref, rtol=1e-4, atol=1e-6)


def test_a_batch_of_packs_sums_to_the_unpacked_batch() -> None:
    model = _lora_model(seed=3)
    rows = _rows(3, 25, seed=2, group="a") + _rows(4, 31, seed=3, group="b")
    packs = pack_rows(rows, max_rows=8)
    assert [p.n_rows for p in packs] == [3, 4]
    ref_loss, ref_n = unpacked_loss(model, rows)
    sums = [pack_loss(model, p) for p in packs]
    assert sum(n for _, n in sums) == ref_n
    assert float(sum(loss for loss, _ in sums)) == pytest.approx(float(ref_loss), rel=1e-5)


def test_bf16_autocast_stays_close_to_float32() -> None:
    model = _lora_model()
    (pack,) = pack_rows(_rows(6, 50, seed=4), max_rows=8)
    fp32, n = pack_loss(model, pack)
    bf16, _ = pack_loss(model, pack, dtype=torch.bfloat16)
    assert float(bf16 / n) == pytest.approx(float(fp32 / n), rel=0.02)
    assert float(bf16 / n) != float(fp32 / n)  # it really ran in bf16


def _young_adapter(model: Any) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(1e-4)  # a young adapter: its delta is below one bf16 step of most outputs


def _layer_delta(model: Any, layer: Any, x: Any, autocast: bool) -> Any:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        on = layer(x).float()
        with model.disable_adapter():
            off = layer(x).float()
    return on - off


@pytest.mark.parametrize("dropout", [0.0, 0.1])  # 0: the fused matmul; 0.1: the float32-output hook
def test_lora_delta_below_bf16_resolution_survives_when_summed_in_float32(dropout: float) -> None:
    from hat.train.lora_precision import lora_sum_in_float32

    model = _lora_model()
    model.base_model.model.model.layers[0].self_attn.q_proj.lora_dropout["default"] = (
        torch.nn.Dropout(dropout) if dropout else torch.nn.Identity()
    )
    model.eval()  # dropout off in the forward; the layer still counts as "with dropout"
    _young_adapter(model)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    x = torch.randn(512, 32, generator=torch.Generator().manual_seed(0))
    exact = _layer_delta(model, layer, x, autocast=False)
    rounded = _layer_delta(model, layer, x, autocast=True)
    counts = lora_sum_in_float32(model)
    kept = _layer_delta(model, layer, x, autocast=True)
    assert counts == ({"fused": 14, "float32_output": 0} if not dropout else {"fused": 13, "float32_output": 1})
    assert float(exact.abs().mean()) > 1e-6

    # how much of the delta the bf16 forward shows: the slope of what it shows on the exact delta
    def slope(shown: Any) -> float:
        return float((shown * exact).sum() / (exact * exact).sum())

    # plain autocast: bf16 base output + delta rounds back onto the same grid point — a dead zone
    assert float((rounded == 0).float().mean()) > 0.5
    assert slope(rounded) < 0.5
    # kept: the delta survives (fused: rounded once from the accumulator, unbiased; hook: exactly)
    assert slope(kept) == pytest.approx(1.0, abs=0.15)
    if dropout:
        assert float((kept - exact).abs().sum() / exact.abs().sum()) < 0.02
    assert torch.equal(_layer_delta(model, layer, x, autocast=False), exact)  # float32 runs PEFT's own path


def test_fused_lora_gradients_match_float32() -> None:
    from hat.train.lora_precision import lora_sum_in_float32

    def grads(fused: bool, autocast: bool) -> tuple[Any, dict[str, Any]]:
        model = _lora_model(seed=3)
        if fused:
            lora_sum_in_float32(model)
        (pack,) = pack_rows(_rows(3, 40, seed=5), max_rows=4)
        loss, n = pack_loss(model, pack, dtype=torch.bfloat16 if autocast else None)
        (loss / n).backward()
        named = {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}
        return float(loss / n), named

    ref_loss, ref = grads(fused=False, autocast=False)
    loss, got = grads(fused=True, autocast=True)
    _, plain = grads(fused=False, autocast=True)
    assert loss == pytest.approx(ref_loss, rel=0.02)
    for name, g in ref.items():
        # as close to float32 as PEFT's own bf16 path is (both: bf16 matmuls, float32 accumulation)
        err, plain_err = float((got[name] - g).norm()), float((plain[name] - g).norm())
        assert err <= 2 * plain_err + 1e-3 * float(g.norm()), name
        assert err < 0.1 * float(g.norm()) + 1e-6, name  # bf16 matmuls on a tiny random model
    assert set(got) == set(ref)


def test_pack_rows_groups_limits_and_reconstructs_rows() -> None:
    rows = _rows(5, 30, seed=5, group="a") + _rows(3, 20, seed=6, group="b") + _rows(2, 30, seed=7, group="a")[:1]
    packs = pack_rows(rows, max_rows=4)
    assert [p.n_rows for p in packs] == [4, 2, 3]  # group a (6 rows) split at 4, then group b
    rebuilt = [r for p in packs for r in p.rows()]
    order = [*rows[:5], rows[8], *rows[5:8]]  # groups in order of first appearance
    assert [(r.input_ids, r.labels) for r in rebuilt] == [(r.input_ids, r.labels) for r in order]
    assert all(Pack.from_dict(json.loads(json.dumps(p.to_dict()))) == p for p in packs)
    assert pack_rows(rows, max_rows=1) and all(p.n_rows == 1 for p in pack_rows(rows, max_rows=1))
    tight = pack_rows(rows[:5], max_rows=16, max_tokens=30 + 2 * 19)
    assert all(p.n_tokens <= 30 + 2 * 19 or p.n_rows == 1 for p in tight) and len(tight) > 1


def test_the_prefix_never_holds_a_trained_token() -> None:
    a = EncodedRow((1, 2, 3, 4, 5, 6), (IGNORE_INDEX, IGNORE_INDEX, 3, 4, 5, 6), "g")
    b = EncodedRow((1, 2, 3, 4, 9, 9), (IGNORE_INDEX, IGNORE_INDEX, 3, 4, 9, 9), "g")
    (pack,) = pack_rows([a, b])
    assert pack.prefix == (1, 2)  # shared up to 4, but 3 and 4 are trained: counted once per row
    same = EncodedRow((1, 2, 3), (IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX), "h")
    (both,) = pack_rows([same, same])
    assert both.prefix == (1, 2) and both.continuations == ((3,), (3,))  # every row keeps a token


def test_datagen_snapshots_share_room_and_harness_and_pack(tmp_path: Path) -> None:
    from hat.train.sft import encode_rows
    from test_datagen import build_tokenizer

    out = tmp_path / "data"
    generate_dataset(DatagenConfig(n_episodes=16, seed=3, hsa_ratio=0.5, comments_per_snapshot=4), out)
    rows = load_rows(out)
    snapshots: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        snapshots.setdefault(row["snapshot"], []).append(row)
    assert len(snapshots) == 4 and all(len(v) == 4 for v in snapshots.values())
    for members in snapshots.values():
        assert len({m["harness_hash"] for m in members}) == 1
        assert len({m["episode_id"] for m in members}) == 4
    tokenizer = build_tokenizer([m["content"] for r in rows for m in r["messages"]], vocab_size=1500)
    encoded, _ = encode_rows(rows, tokenizer)
    packs = pack_rows(encoded, max_rows=8)
    assert len(packs) == 4 and {row_group(r) for r in rows} == {f"snapshot:{k}" for k in snapshots}
    # under the production harness the shared prefix is most of the system prompt (the per-comment
    # FAQ block comes last; HSA variants may move it up)
    production = [r for r in rows if r["harness_kind"] == "production"]
    encoded_production, _ = encode_rows(production, tokenizer)
    system = [len(tokenizer(r["messages"][0]["content"])["input_ids"]) for r in production]
    assert production and min(len(p.prefix) for p in pack_rows(encoded_production)) > 0.6 * min(system)
    assert sum(p.n_tokens for p in packs) < 0.75 * sum(len(e.input_ids) for e in encoded)


def test_one_comment_per_snapshot_keeps_the_evaluation_episodes() -> None:
    from hat.env.viewers import generate_episodes

    plain = generate_episodes(12, 5)
    assert generate_episodes(12, 5, comments_per_snapshot=1) == plain
    shared = generate_episodes(12, 5, comments_per_snapshot=6)
    assert len({json.dumps(e.room, sort_keys=True) for e in shared[:6]}) == 1
    assert [e.gold.intent for e in shared] == [e.gold.intent for e in plain]


# -- the packed trainer ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    from conftest import save_tiny_llama
    from test_datagen import build_tokenizer

    data = tmp_path_factory.mktemp("pk-data") / "data"
    generate_dataset(DatagenConfig(n_episodes=8, seed=4, hsa_ratio=0.0, comments_per_snapshot=4), data)
    rows = load_rows(data)
    folder = tmp_path_factory.mktemp("pk-model")
    tokenizer = build_tokenizer([m["content"] for r in rows for m in r["messages"]], vocab_size=1500)
    save_tiny_llama(folder, tokenizer)
    return folder, rows


def _cfg(out: Path, model: Path, **changes: Any) -> Any:
    from hat.train.sft_config import HatSFTConfig

    fields: dict[str, Any] = {
        "output_dir": str(out), "model": str(model), "max_steps": 4, "learning_rate": 1e-2, "lora_dropout": 0.1,
        "logging_steps": 1, "save_steps": 2, "max_length": None, "disable_tqdm": True,
        "dataloader_pin_memory": False, "seed": 0, "pack_max_rows": 2,
    }  # fmt: skip
    return HatSFTConfig(**{**fields, **changes})


class _StopAt:
    """A callback that stops training after ``step`` (as a kill right after that checkpoint would)."""

    def __new__(cls, step: int) -> Any:
        from transformers import TrainerCallback

        class Stop(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step >= step:
                    control.should_training_stop = True

        return Stop()


def _adapter(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_resume_is_bit_for_bit_and_checkpoints_are_whole(
    tiny: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from hat.train.sft import train_sft

    model, rows = tiny
    straight = train_sft(_cfg(tmp_path / "a", model), rows)
    train_sft(_cfg(tmp_path / "b", model), rows, callbacks=[_StopAt(2)])  # interrupted after step 2
    (tmp_path / "b" / ".staging-checkpoint" / "checkpoint-3").mkdir(parents=True)  # a crash mid-save
    with open(tmp_path / "b" / "steps.jsonl", "a") as fh:
        fh.write('{"loss": 7.1, "rows": 2, "st')  # ... and mid-write of the step log
    resumed = train_sft(_cfg(tmp_path / "b", model, resume_from_checkpoint="latest"), rows)
    assert straight.global_step == resumed.global_step == 4
    a, b = _adapter(tmp_path / "a"), _adapter(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "b" / ".staging-checkpoint").exists()
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    steps = [json.loads(x) for x in (tmp_path / "b" / "steps.jsonl").read_text().splitlines()]
    straight_steps = [json.loads(x) for x in (tmp_path / "a" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert [s["loss"] for s in steps] == [s["loss"] for s in straight_steps]
    assert all(s["rows"] == 2 and s["trained_tokens"] > 0 and s["wall_s"] > 0 for s in steps)
    config = json.loads((tmp_path / "b" / "checkpoint-2" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(model.resolve())


def test_packed_training_lowers_the_loss_with_general_replay(
    tiny: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from hat.train.sft import train_sft

    model, rows = tiny
    general = tmp_path / "general"
    general.mkdir()
    replay = [
        {"messages": [{"role": "user", "content": f"Name a colour {i}."}, {"role": "assistant", "content": "Blue."}],
         "harness_kind": "general", "episode_id": f"g{i}"}
        for i in range(4)
    ]  # fmt: skip
    (general / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replay))
    cfg = _cfg(
        tmp_path / "o",
        model,
        max_steps=12,
        save_steps=100,
        learning_rate=3e-2,
        lora_dropout=0.0,
        replay_data=str(general),
        replay_ratio=0.5,
    )
    result = train_sft(cfg, rows)
    assert result.n_examples == len(rows) + 4
    steps = [json.loads(x) for x in (tmp_path / "o" / "steps.jsonl").read_text().splitlines()]
    assert steps[-1]["loss"] < 0.8 * steps[0]["loss"]


def test_length_buckets_bound_padding_and_keep_every_row() -> None:
    from hat.train.packing import length_buckets

    lengths = [500, 90, 480, 100, 510, 95, 300]
    buckets = length_buckets(lengths, max_rows=3, max_waste=0.2)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for bucket in buckets:
        assert len(bucket) <= 3
        longest, real = max(lengths[i] for i in bucket), sum(lengths[i] for i in bucket)
        assert longest * len(bucket) <= 1.2 * real
    assert [sorted(b) for b in buckets] == [[0, 2, 4], [6], [1, 3, 5]]


def test_bf16_loss_curve_follows_float32_on_a_fixed_batch(
    tiny: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from hat.train.sft import train_sft

    model, rows = tiny
    curves = {}
    for name, flag in (("fp32", False), ("bf16", True)):
        out = tmp_path / name
        train_sft(_cfg(out, model, max_steps=6, save_steps=100, lora_dropout=0.0, autocast_bf16=flag), rows[:2])
        curves[name] = [json.loads(x)["loss"] for x in (out / "steps.jsonl").read_text().splitlines()]
    assert curves["fp32"][-1] < curves["fp32"][0]  # it learned
    assert curves["bf16"] != curves["fp32"]  # bf16 really ran
    assert curves["bf16"] == pytest.approx(curves["fp32"], rel=0.03)


@pytest.mark.parametrize(("autocast", "float32_sum"), [(True, True), (True, False), (False, True)])
def test_trainer_sums_lora_deltas_in_float32_only_under_bf16_autocast(
    tiny: tuple[Path, list[dict[str, Any]]], tmp_path: Path, autocast: bool, float32_sum: bool
) -> None:
    from hat.train.lora_precision import _FusedLoraLinear
    from hat.train.sft import build_trainer

    model, rows = tiny
    cfg = _cfg(tmp_path, model, lora_dropout=0.0, autocast_bf16=autocast, lora_float32_sum=float32_sum)
    trainer = build_trainer(cfg, rows[:4]).trainer
    marked = [m for m in trainer.model.modules() if getattr(m, "_hat_float32_sum", False)]
    assert bool(marked) == (autocast and float32_sum)
    pack = trainer.train_dataset[0]
    calls = []
    original = _FusedLoraLinear.apply

    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    try:
        _FusedLoraLinear.apply = counted  # type: ignore[method-assign]
        trainer.compute_loss(trainer.model, {"packs": [Pack.from_dict(pack)]})
    finally:
        _FusedLoraLinear.apply = original  # type: ignore[method-assign]
    assert bool(calls) == (autocast and float32_sum)  # the training step really runs the fused sum
