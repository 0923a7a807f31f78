"""The fast path (issue 15): the adapter merged into a GGUF, speculative decoding, and the engine
``smollm2-hat`` picks.

Everything runs on a tiny random Llama written as a GGUF (``tests/tiny_gguf.py``), which both
engines load, with a random PEFT LoRA made on transformers' view of it - so "the merged GGUF on
llama.cpp" and "the adapter on transformers" are compared on the same weights.

Measured on that tiny model (greedy, 5 prompts × 16 tokens, token positions agreeing with
transformers + PEFT): merged ``f32`` 100 % (identical), ``f16`` 57/69, ``q8_0`` 35/69, ``q4_1`` 0/69.
The tiny model (width 32, random weights) is far more sensitive to weight rounding than a trained
one, so only ``f32`` is asserted token-identical; the quantised types are asserted on the weights
(within one quantisation step of PEFT's merge). The bundled model's agreement rate is measured by
the slow test at the end (``-m slow``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hat.errors import HatError, ModelSpecError
from hat.models import load_model
from hat.models.base import GenerationConfig
from tiny_gguf import write_tiny_gguf

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="needs llama-cpp-python (extra 'fast')")
PROMPTS = [
    [{"role": "user", "content": text}]
    for text in ("the red jacket", "is the blue bag in stock?", "hello host", "show me", "price of the dress")
]
GREEDY = GenerationConfig(max_new_tokens=16)


@pytest.fixture(scope="module")
def base_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def adapter(base_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random LoRA (all linear layers, r = 4, alpha = 8) on transformers' view of the tiny GGUF."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        base_gguf.parent, gguf_file=base_gguf.name, dtype=torch.float32
    )
    torch.manual_seed(1)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    out = tmp_path_factory.mktemp("adapter") / "tiny-hat"
    peft.get_peft_model(model, lora).save_pretrained(out)
    config = json.loads((out / "adapter_config.json").read_text())
    (out / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base_gguf)}))
    return out


@pytest.fixture(scope="module")
def on_transformers(adapter: Path) -> Any:
    return load_model(f"hf:{adapter}")


def _merged(adapter: Path, base: Path, folder: Path, quant: str) -> Path:
    from hat.models.gguf_merge import merge_lora_into_gguf

    return merge_lora_into_gguf(adapter, base, folder / f"merged-{quant}.gguf", quant=quant)


# --- the merged export ---------------------------------------------------------------------------------
@needs_llama
def test_merged_gguf_gives_the_adapters_greedy_tokens(adapter, base_gguf, on_transformers, tmp_path):
    from hat.models.llamacpp_backend import LlamaCppModel

    merged = LlamaCppModel(_merged(adapter, base_gguf, tmp_path, "f32"), threads=1, n_ctx=512)
    base = LlamaCppModel(base_gguf, threads=1, n_ctx=512)
    try:
        expected = [on_transformers.generate(p, GREEDY).text for p in PROMPTS]
        assert [merged.generate(p, GREEDY).text for p in PROMPTS] == expected
        assert [base.generate(p, GREEDY).text for p in PROMPTS] != expected  # the adapter changes the output
    finally:
        merged.close()
        base.close()


@needs_llama
def test_merged_and_runtime_lora_give_the_same_tokens(adapter, base_gguf, tmp_path):
    """The two ways llama.cpp serves an adapter (merged, or a GGUF LoRA at run time) agree."""
    from hat.models.gguf_lora import convert_peft_lora_to_gguf
    from hat.models.llamacpp_backend import LlamaCppModel

    lora = convert_peft_lora_to_gguf(adapter, base_gguf, tmp_path / "lora.gguf")
    runtime = LlamaCppModel(base_gguf, threads=1, n_ctx=512, lora=lora)
    merged = LlamaCppModel(_merged(adapter, base_gguf, tmp_path, "f32"), threads=1, n_ctx=512)
    try:
        assert [merged.generate(p, GREEDY).text for p in PROMPTS] == [runtime.generate(p, GREEDY).text for p in PROMPTS]
    finally:
        runtime.close()
        merged.close()


def _hf_weights_of(path: Path) -> dict[str, np.ndarray]:
    """The GGUF's tensors de-quantised and in transformers' row order (q/k un-permuted)."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    reader = gguf.GGUFReader(str(path))
    processor = LlamaTensorProcessor(config={"num_attention_heads": 4, "num_key_value_heads": 2})
    out = {}
    for tensor in reader.tensors:
        weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        out[tensor.name] = processor.process(weights, tensor.name).weights
    return out


PAIRS = (("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("ffn_up", "mlp.up_proj"))


@pytest.mark.parametrize(("quant", "steps"), [("f32", 1e-4), ("f16", 1.0), ("q8_0", 1.0)])
def test_merged_weights_are_peft_merge_and_unload_within_one_rounding_step(adapter, base_gguf, tmp_path, quant, steps):
    merged_model = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(base_gguf.parent, gguf_file=base_gguf.name),
        str(adapter),
    ).merge_and_unload()
    state = {k: v.detach().numpy() for k, v in merged_model.state_dict().items()}
    got = _hf_weights_of(_merged(adapter, base_gguf, tmp_path, quant))
    for layer in range(2):
        for gguf_name, hf_name in PAIRS:
            expected = state[f"model.layers.{layer}.{hf_name}.weight"]
            actual = got[f"blk.{layer}.{gguf_name}.weight"].reshape(expected.shape)
            # one rounding step of the type: f16 ~ |w|/2^10, q8_0 = block max/127
            step = {"f32": 1.0, "f16": np.abs(expected).max() / 1024, "q8_0": np.abs(expected).max() / 127}[quant]
            assert np.abs(actual - expected).max() <= steps * step, (quant, gguf_name)


def test_merge_copies_metadata_and_untouched_tensors_byte_for_byte(adapter, base_gguf, tmp_path):
    base, merged = gguf.GGUFReader(str(base_gguf)), gguf.GGUFReader(str(_merged(adapter, base_gguf, tmp_path, "q8_0")))
    assert merged.fields["tokenizer.chat_template"].contents() == base.fields["tokenizer.chat_template"].contents()
    assert merged.fields["tokenizer.ggml.tokens"].contents() == base.fields["tokenizer.ggml.tokens"].contents()
    assert merged.fields["hat.merge.quant"].contents() == "q8_0"
    before = {t.name: t for t in base.tensors}
    for tensor in merged.tensors:
        if tensor.name in ("token_embd.weight", "output.weight", "blk.0.attn_norm.weight"):
            assert np.array_equal(tensor.data, before[tensor.name].data)
        elif tensor.name == "blk.0.ffn_down.weight":
            assert tensor.tensor_type == gguf.GGMLQuantizationType.Q8_0


def test_merged_gguf_is_built_once_per_adapter_and_type(adapter, base_gguf, tmp_path):
    from hat.models.gguf_merge import merged_gguf_for

    built: list[Path] = []
    first = merged_gguf_for(adapter, base_gguf, cache_dir=tmp_path, on_build=built.append)
    stamp = first.stat().st_mtime_ns
    assert merged_gguf_for(adapter, base_gguf, cache_dir=tmp_path, on_build=built.append) == first
    assert first.stat().st_mtime_ns == stamp and built == [first] and first.name.endswith("-q8_0.gguf")
    assert merged_gguf_for(adapter, base_gguf, quant="f16", cache_dir=tmp_path) != first
    with pytest.raises(HatError, match="unknown merged weight type"):
        merged_gguf_for(adapter, base_gguf, quant="q3_k", cache_dir=tmp_path)


def test_export_writes_the_merged_gguf_next_to_the_adapter(adapter, tmp_path):
    from hat.train.export import export_adapter

    folder = export_adapter(adapter, tmp_path / "shipped", gguf="f16")
    merged = folder / "shipped-f16.gguf"
    assert merged.is_file() and "shipped-f16.gguf" in (folder / "README.md").read_text()
    assert gguf.GGUFReader(str(merged)).fields["hat.merge.adapter"].contents() == "shipped"
    hf_base = tmp_path / "hf-base"
    hf_base.mkdir()
    config = json.loads((adapter / "adapter_config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "adapter_model.safetensors").write_bytes((adapter / "adapter_model.safetensors").read_bytes())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(hf_base)}))
    with pytest.raises(HatError, match="is not a GGUF file"):
        export_adapter(other, tmp_path / "x", gguf="q8_0")


@needs_llama
def test_llamacpp_spec_merges_a_peft_folder_unless_told_not_to(adapter, base_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("HAT_CACHE", str(tmp_path))
    merged = load_model(f"llamacpp:{base_gguf}?lora={adapter}&threads=1&n_ctx=512")
    runtime = load_model(f"llamacpp:{base_gguf}?lora={adapter}&merge=0&threads=1&n_ctx=512")
    try:
        assert merged.path.parent == tmp_path / "gguf-merged" and merged.path.name.endswith("-q8_0.gguf")
        assert runtime.path == base_gguf  # the base, with the adapter as a run-time GGUF LoRA
    finally:
        merged.close()
        runtime.close()


# --- speculative decoding on transformers ----------------------------------------------------------------
def test_transformers_prompt_lookup_keeps_greedy_output_and_counts_drafts(base_gguf):
    plain = load_model(f"hf:{base_gguf}")
    drafting = load_model(f"hf:{base_gguf}", speculative=5)
    config = GenerationConfig(max_new_tokens=40)
    accepted = 0
    for messages in PROMPTS[:3]:
        expected = plain.generate(messages, config)
        got = drafting.generate(messages, config)
        assert (got.text, got.completion_tokens) == (expected.text, expected.completion_tokens)
        assert 0 <= got.accepted_tokens <= min(got.draft_tokens, got.completion_tokens)
        streamed = drafting.stream(messages, config)
        assert "".join(streamed) == expected.text and streamed.generation is not None
        assert (streamed.generation.draft_tokens, streamed.generation.accepted_tokens) == (
            got.draft_tokens,
            got.accepted_tokens,
        )
        accepted += got.accepted_tokens
    assert accepted > 0  # drafts were proposed and accepted: the counting is exercised


def test_transformers_prompt_lookup_with_sessions_stays_greedy(base_gguf):
    """transformers' assisted decoding restarts its prefill from the whole prompt, so a reused KV
    cache would be encoded twice; with speculative decoding the backend keeps no sessions."""
    plain = load_model(f"hf:{base_gguf}")
    drafting = load_model(f"hf:{base_gguf}", speculative=5)
    config = GenerationConfig(max_new_tokens=40)
    first = drafting.generate(PROMPTS[0], config, cache_key="room")
    follow = [*PROMPTS[0], {"role": "assistant", "content": first.text}, {"role": "user", "content": "and the bag?"}]
    assert drafting.generate(follow, config, cache_key="room").text == plain.generate(follow, config).text
    assert drafting.generate(PROMPTS[1], config, cache_key="room").text == plain.generate(PROMPTS[1], config).text


def test_transformers_batch_falls_back_to_rows_with_speculative_decoding(base_gguf):
    drafting = load_model(f"hf:{base_gguf}", speculative=3)
    batch = drafting.generate_batch(PROMPTS[:2], GenerationConfig(max_new_tokens=8))
    assert [g.text for g in batch] == [
        drafting.generate(p, GenerationConfig(max_new_tokens=8)).text for p in PROMPTS[:2]
    ]
    with pytest.raises(ModelSpecError, match="speculative"):
        load_model(f"hf:{base_gguf}", speculative=-1)


# --- which engine smollm2-hat runs on ------------------------------------------------------------------
class _Loaded:
    def __init__(self, engine: str, kw: dict[str, Any]) -> None:
        self.engine, self.kw = engine, kw


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Both engines replaced by recorders (no weights load); ``state["llama"]`` is what the fast
    engine does: ``"ok"``, ``"missing"`` (llama_cpp does not import) or an exception to raise."""
    import hat.models as models
    from hat.models import llamacpp_backend

    state: dict[str, Any] = {"llama": "ok"}

    def fast(argument: str, **kw: Any) -> _Loaded:
        if state["llama"] == "missing":
            raise llamacpp_backend.LlamaCppMissing()
        if isinstance(state["llama"], Exception):
            raise state["llama"]
        assert argument == "smollm2-hat"
        return _Loaded("llamacpp", kw)

    monkeypatch.setattr(llamacpp_backend.LlamaCppModel, "from_spec", staticmethod(fast))
    monkeypatch.setattr(
        models.TransformersModel, "from_pretrained", staticmethod(lambda path, **kw: _Loaded("transformers", kw))
    )
    monkeypatch.delenv("HAT_ENGINE", raising=False)
    return state


def test_smollm2_hat_stays_on_transformers_by_default_until_measured(engines, capsys):
    """The fast engine is opt-in (engine=auto / $HAT_ENGINE) until issue 15's tables are measured."""
    assert load_model("smollm2-hat").engine == "transformers" and capsys.readouterr().err == ""


def test_smollm2_hat_runs_on_llama_cpp_when_it_can(engines, capsys, monkeypatch):
    monkeypatch.setenv("HAT_ENGINE", "auto")
    model = load_model("smollm2-hat")
    assert model.engine == "llamacpp" and model.kw == {"name": "smollm2-hat"}
    assert capsys.readouterr().err == ""
    fast = load_model("smollm2-hat?speculative=8")
    assert fast.engine == "llamacpp" and fast.kw["speculative"] == 8


def test_smollm2_hat_falls_back_to_transformers_with_one_line(engines, capsys, monkeypatch):
    monkeypatch.setenv("HAT_ENGINE", "auto")
    engines["llama"] = "missing"
    model = load_model("smollm2-hat")
    assert model.engine == "transformers"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "transformers" in lines[0] and "llama-cpp-python is not installed" in lines[0]
    engines["llama"] = HatError("merge failed")
    assert load_model("smollm2-hat").engine == "transformers"
    assert "the fast engine failed (HatError: merge failed)" in capsys.readouterr().err


def test_smollm2_hat_engine_choice_is_explicit_when_asked(engines, capsys, monkeypatch):
    from hat.models.llamacpp_backend import LlamaCppMissing

    monkeypatch.setenv("HAT_ENGINE", "auto")

    assert load_model("smollm2-hat", dtype="bfloat16").engine == "transformers"  # a transformers-only option
    assert "dtype= is a transformers option" in capsys.readouterr().err
    assert load_model("smollm2-hat?engine=transformers&speculative=4").kw == {"speculative": 4, "name": ANY_NAME}
    monkeypatch.setenv("HAT_ENGINE", "transformers")
    assert load_model("smollm2-hat").engine == "transformers" and capsys.readouterr().err == ""
    engines["llama"] = "missing"
    with pytest.raises(LlamaCppMissing):
        load_model("smollm2-hat?engine=llamacpp")  # asked for the fast engine: no silent fallback
    for bad, message in [
        ("smollm2-hat?engine=gpu", "is not one of"),
        ("smollm2-hat?temperature=1", "unknown smollm2-hat option"),
        ("smollm2-hat?speculative=many", "must be a number"),
        ("smollm2-hat:extra", "is not understood"),
    ]:
        with pytest.raises(ModelSpecError, match=message):
            load_model(bad)


class _AnyName:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("smollm2-hat")


ANY_NAME = _AnyName()


# --- the bundled model (slow: loads SmolLM2 twice) ---------------------------------------------------
@pytest.mark.slow
@needs_llama
@pytest.mark.parametrize("quant", ["q8_0", "f16"])
def test_shipped_adapter_merged_agrees_with_transformers(quant, tmp_path):
    """Greedy agreement of ``llamacpp:smollm2-hat`` (merged) with ``smollm2-hat`` on transformers:
    the share of prompts whose first 32 tokens are identical, printed (run with -s) and bounded
    below. Not bit-equal by construction: the base is Q4_1 and llama.cpp quantises activations for
    its quantised matmuls, which transformers (de-quantised fp32) does not."""
    fast = load_model(f"llamacpp:smollm2-hat?quant={quant}&threads=2")
    slow = load_model("smollm2-hat?engine=transformers")
    prompts = [[{"role": "user", "content": c}] for c in ("Hi!", "Is the red dress in stock in M?", "How much is it?")]
    config = GenerationConfig(max_new_tokens=32)
    same = sum(fast.generate(p, config).text == slow.generate(p, config).text for p in prompts)
    print(f"\nsmollm2-hat merged {quant}: {same}/{len(prompts)} prompts identical to transformers", file=sys.stderr)
    assert same >= 1


# --- make install: the fast engine is built when it can be, and its failure is not the install's ----
FAKE_PIP = """#!/bin/sh
if [ "$1" = "show" ]; then printf 'Name: llama_cpp_python\\nVersion: 0.3.36\\n'; exit 0; fi
echo "  [ 50%] Building CXX object vendor/llama.cpp/src/CMakeFiles/llama.dir/llama.cpp.o"
echo "args: $* CMAKE_ARGS=$CMAKE_ARGS"
if [ -n "$FAKE_BUILD_OK" ]; then touch "$(dirname "$0")/installed"; exit 0; fi
echo "error: the compiler crashed"; exit 1
"""
FAKE_PYTHON = '#!/bin/sh\n[ -f "$(dirname "$0")/installed" ]\n'


@pytest.mark.skipif(__import__("shutil").which("make") is None, reason="needs make")
@pytest.mark.parametrize(("required", "build_ok"), [(False, False), (True, False), (False, True)])
def test_make_builds_the_fast_engine_and_survives_a_failed_build(tmp_path, required, build_ok):
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("pip", FAKE_PIP), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, **({"FAKE_BUILD_OK": "1"} if build_ok else {})}
    args = ["make", "--no-print-directory", "-C", str(Path(__file__).parents[1]), "fast-engine"]
    args += [f"BIN={bin_dir}", f"VENV={tmp_path}", f"FAST_REQUIRED={int(required)}"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("fast engine: installing llama-cpp-python==") and "5-15 minutes" in lines[0]
    assert "[ 50%] Building CXX object" in done.stdout  # the compiler's progress is shown
    assert "-DGGML_NATIVE=ON" in (tmp_path / "fast-engine-build.log").read_text()  # the whole log is kept
    if build_ok:
        assert done.returncode == 0 and lines[-1] == "fast engine: installed"
    elif required:  # make install-fast: asked for it, so a failure fails
        assert done.returncode != 0 and "the build failed" in lines[-1]
    else:  # make install: goes on, and says how HAT runs without it
        assert done.returncode == 0 and "transformers" in lines[-1] and "make install-fast" in lines[-1]
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    if build_ok:
        assert again.stdout.strip() == "fast engine: llama-cpp-python 0.3.36 already installed"
