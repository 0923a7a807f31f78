"""Batch-invariant decoding (hat.models.invariant): in bfloat16, a conversation decodes to the same
tokens alone and in any batch, with any prefix-cache history; and the invariant path computes the
same attention as transformers' SDPA path (float32, within rounding)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hat.models.base import Generation, GenerationConfig

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def flat_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with *flat* logits (initializer 0.02): near-ties everywhere, so bfloat16
    rounding differences would show as different greedy tokens."""
    from conftest import save_tiny_llama
    from test_datagen import build_tokenizer

    texts = [f"viewer {i} asks about the price of item {i % 7} and the shipping time" for i in range(60)]
    tokenizer = build_tokenizer(texts, vocab_size=400)
    folder = tmp_path_factory.mktemp("flat-llama")
    shape = {"hidden_size": 96, "intermediate_size": 192, "num_attention_heads": 6, "num_key_value_heads": 2}
    return save_tiny_llama(folder, tokenizer, initializer_range=0.02, **shape)


def _chats(n: int) -> list[list[dict[str, str]]]:
    system = {"role": "system", "content": "You host a live room. " + "Rules: be brief and polite. " * 6}
    return [
        [system, {"role": "user", "content": f"viewer {i} asks about the price of item {i % 7}" + " and more" * i}]
        for i in range(n)
    ]


def _load(folder: Path, **kw: Any) -> Any:
    from hat.models import TransformersModel
    from hat.models.invariant import InvariantConfig

    return TransformersModel.from_pretrained(
        folder, dtype="bfloat16", batch_invariant=InvariantConfig(rows=4, chunk=16), **kw
    )


def test_bfloat16_rows_decode_alike_alone_and_in_any_batch(flat_llama: Path) -> None:
    config = GenerationConfig(max_new_tokens=24)
    chats = _chats(7)
    alone_model = _load(flat_llama)
    alone = [alone_model.generate(c, config).text for c in chats]
    batch_model = _load(flat_llama)
    # 7 rows: two decode groups of 4; rows leave at different steps; prefixes shared between rows.
    together = [g.text for g in batch_model.generate_batch(chats, config)]
    assert together == alone
    shuffled = [6, 2, 0, 5]
    assert [g.text for g in batch_model.generate_batch([chats[i] for i in shuffled], config)] == [
        alone[i] for i in shuffled
    ]
    assert len(set(alone)) > 3  # the rows really differ


def test_sessions_and_later_rounds_stay_invariant(flat_llama: Path) -> None:
    """Round 2 extends round 1 through a kept session (own or another row's prefix): the same tokens
    as a fresh model that encodes everything from scratch."""
    config = GenerationConfig(max_new_tokens=16)
    chats = _chats(5)
    model = _load(flat_llama)
    keys = [f"ep{i}" for i in range(len(chats))]
    first = model.generate_batch(chats, config, cache_keys=keys)
    follow = [
        [*c, {"role": "assistant", "content": g.text}, {"role": "user", "content": "and the size?"}]
        for c, g in zip(chats, first, strict=True)
    ]
    second = model.generate_batch(follow, config, cache_keys=keys)
    assert all(g.cached_tokens > 0 for g in second)
    fresh = _load(flat_llama)
    assert [g.text for g in second] == [fresh.generate(c, config).text for c in follow]
    # A key reused by another conversation (a worker's next episode) shares only the system prompt.
    reused = [fresh.generate(c, config, cache_key="worker") for c in follow]
    assert [g.text for g in reused] == [g.text for g in second]
    assert all(g.cached_tokens > 0 for g in reused[1:])


def test_decode_logits_do_not_depend_on_the_other_rows(flat_llama: Path) -> None:
    """The decode step's logits for a row are bit-identical whether the other rows are dummies or
    other conversations (the property the greedy tests rely on, checked below the argmax)."""
    from hat.models.invariant import DecodeRows, decoding

    model = _load(flat_llama).model
    hidden = model.config
    kv, dim = hidden.num_key_value_heads, hidden.hidden_size // hidden.num_attention_heads
    torch.manual_seed(1)
    lengths = [5, 9, 3]

    def buffers(n: int) -> tuple[list[Any], list[Any]]:
        keys = [[torch.randn(1, kv, 40, dim).bfloat16() for _ in range(n)] for _ in range(hidden.num_hidden_layers)]
        values = [[torch.randn(1, kv, 40, dim).bfloat16() for _ in range(n)] for _ in range(hidden.num_hidden_layers)]
        return keys, values

    keys, values = buffers(3)
    tokens, positions = torch.tensor([[7], [11], [13], [0]]), torch.tensor([[5], [9], [3], [0]])

    def step(rows: DecodeRows, tok: Any, pos: Any) -> Any:
        with torch.inference_mode(), decoding(rows):
            return model(input_ids=tok, position_ids=pos, use_cache=False, logits_to_keep=1).logits

    together = step(
        DecodeRows([[b.clone() for b in ly] for ly in keys], [[b.clone() for b in ly] for ly in values], lengths),
        tokens,
        positions,
    )
    for i in range(3):
        solo_rows = DecodeRows([[ly[i].clone()] for ly in keys], [[ly[i].clone()] for ly in values], [lengths[i]])
        solo_tok = torch.tensor([[tokens[i, 0].item()], [0], [0], [0]])
        solo_pos = torch.tensor([[positions[i, 0].item()], [0], [0], [0]])
        assert torch.equal(step(solo_rows, solo_tok, solo_pos)[0], together[i])


def test_invariant_attention_matches_sdpa_in_float32() -> None:
    """Prefill (bottom-right causal over a cached prefix) and decode (row by row, own keys) compute
    what transformers' SDPA attention computes."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from hat.models.invariant import DecodeRows, attention, decoding

    class Module(torch.nn.Module):
        num_key_value_groups, is_causal, layer_idx = 3, True, 0

    module = Module()
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 6, 5, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    mine, _ = attention(module, q, k, v, None, scaling=0.3)
    causal = torch.arange(12)[None, :] <= torch.arange(7, 12)[:, None]
    ref, _ = sdpa_attention_forward(module, q, k, v, causal[None, None], scaling=0.3)
    torch.testing.assert_close(mine, ref)
    # Decode: two rows with 4 and 9 cached keys; the new token's key/value go into each row's buffer.
    k_bufs = [torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)]
    v_bufs = [torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)]
    rows = DecodeRows([[b.clone() for b in k_bufs]], [[b.clone() for b in v_bufs]], [4, 9])
    q1, k1, v1 = torch.randn(3, 6, 1, 8), torch.randn(3, 2, 1, 8), torch.randn(3, 2, 1, 8)
    with decoding(rows):
        out, _ = attention(module, q1, k1, v1, None, scaling=0.3)
    for i, n in enumerate([4, 9]):
        keys = torch.cat([k_bufs[i][:, :, :n], k1[i : i + 1]], dim=2)
        vals = torch.cat([v_bufs[i][:, :, :n], v1[i : i + 1]], dim=2)
        ref_i, _ = sdpa_attention_forward(module, q1[i : i + 1], keys, vals, None, scaling=0.3)
        torch.testing.assert_close(out[i : i + 1], ref_i)
        assert torch.equal(rows.keys[0][i][:, :, n], k1[i, :, 0][None])
    assert not out[2].any()  # a dummy row gets zeros


def test_float32_invariant_path_agrees_with_plain_greedy(flat_llama: Path) -> None:
    """Chunked prefill and row-by-row decode are the same model: in float32 they pick the tokens the
    plain path picks (rounding differs, so this holds unless two logits nearly tie)."""
    from hat.models import TransformersModel
    from hat.models.invariant import InvariantConfig

    config = GenerationConfig(max_new_tokens=12)
    chats = _chats(4)
    plain = TransformersModel.from_pretrained(flat_llama)
    inv = TransformersModel.from_pretrained(flat_llama, batch_invariant=InvariantConfig(rows=4, chunk=16))
    same = sum(plain.generate(c, config).text == inv.generate(c, config).text for c in chats)
    assert same >= 3


# -- continuous batching: rows join and leave a running decode ----------------------------------


def _conversations(n: int, rounds: int) -> dict[int, list[list[dict[str, str]]]]:
    """Per tag, the user turns of a multi-round conversation (replies are filled in as they come)."""
    later = [[{"role": "user", "content": f"round {r}: and item {{}}?"}] for r in range(1, rounds)]
    return {
        i: [c, *[[{"role": "user", "content": t[0]["content"].format(i + r)}] for r, t in enumerate(later, 1)]]
        for i, c in enumerate(_chats(n))
    }


def _converse(model: Any, turns: list[list[dict[str, str]]], configs: list[GenerationConfig], key: str) -> list[str]:
    """Run one conversation round by round through ``model.generate`` (each round extends the last)."""
    messages: list[dict[str, str]] = []
    texts = []
    for turn, config in zip(turns, configs, strict=True):
        messages = [*messages, *turn]
        reply = model.generate(messages, config, cache_key=key).text
        texts.append(reply)
        messages = [*messages, {"role": "assistant", "content": reply}]
    return texts


@pytest.mark.parametrize("engines", [1, 2])
def test_continuous_batching_equals_each_conversation_alone(flat_llama: Path, engines: int) -> None:
    """Worker threads with uneven pauses and reply budgets, one or two decode engines on their own
    threads: later rounds join a decode that is already running (checked), and every round's text
    equals the conversation run alone."""
    import random
    import threading

    from hat.models.batching import BatchingModel

    convs = _conversations(6, rounds=3)
    budgets = {i: [GenerationConfig(max_new_tokens=4 + 7 * ((i + r) % 3)) for r in range(3)] for i in convs}
    alone = {i: _converse(_load(flat_llama), convs[i], budgets[i], "solo") for i in convs}

    model = _load(flat_llama)
    engine_adds: list[int] = []  # rows already decoding in the engine a request joins
    with BatchingModel(model, workers=5, engines=engines) as batcher:
        assert len(batcher.engines) == engines and all(e.slots.group == 4 for e in batcher.engines)
        for engine in batcher.engines:
            engine.add = _spy(engine, engine_adds)
        out: dict[int, list[str]] = {}
        rng = random.Random(3)
        pauses = {i: [rng.uniform(0, 0.02) for _ in range(3)] for i in convs}
        tags = list(convs)

        def work() -> None:
            try:
                while tags:
                    tag = tags.pop(0)
                    with batcher.tagged(tag):
                        messages: list[dict[str, str]] = []
                        for turn, config, pause in zip(convs[tag], budgets[tag], pauses[tag], strict=True):
                            time.sleep(pause)
                            messages = [*messages, *turn]
                            reply = batcher.generate(messages, config, cache_key="ep").text
                            out.setdefault(tag, []).append(reply)
                            messages = [*messages, {"role": "assistant", "content": reply}]
            finally:
                batcher.retire()

        threads = [threading.Thread(target=work) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
            assert not thread.is_alive()
    assert out == alone
    assert any(n > 0 for n in engine_adds)  # some rounds joined rows that were mid-decode
    assert max(engine_adds) < 4  # never more rows than slots
    steps = sum(e.slots.steps for e in batcher.engines)
    assert steps > 0 and sum(e.slots.row_steps for e in batcher.engines) / steps > 1
    assert all(e.prefilled > 0 and e.decode_s > 0 for e in batcher.engines)


def _spy(engine: Any, seen: list[int]) -> Any:
    add = engine.add

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(len(engine.slots.rows))
        return add(*args, **kwargs)

    return spy


def test_continuous_engine_hands_back_errors_and_sampling_runs_alone(flat_llama: Path) -> None:
    from hat.errors import ModelError
    from hat.models.batching import BatchingModel

    model = _load(flat_llama)
    engine = model.continuous()
    assert engine is not None
    job = engine.add(_chats(1)[0], GenerationConfig(max_new_tokens=1))  # done at prefill: no step needed
    assert engine.live == 1
    ((handed, generation),) = engine.step()
    assert handed is job and isinstance(generation, Generation) and generation.completion_tokens == 1
    bad = engine.add([{"role": "user", "content": "x"}] * 0, GenerationConfig(max_new_tokens=4))
    ((handed, error),) = engine.step()
    assert handed is bad and isinstance(error, ModelError)
    with pytest.raises(ModelError, match="greedily"):
        engine.add(_chats(1)[0], GenerationConfig(max_new_tokens=4, temperature=0.7))
    with BatchingModel(model, workers=1) as batcher, batcher.tagged(0):
        sampled = batcher.generate(_chats(1)[0], GenerationConfig(max_new_tokens=4, temperature=0.7, seed=1))
    assert sampled.completion_tokens > 0
    from hat.models import TransformersModel

    assert TransformersModel.from_pretrained(flat_llama).continuous() is None
