from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

MINI_TOOLS = {
    "get_price": (
        "Price of a product.",
        {"product": {"type": "string"}},
        ["product"],
        "python:toolbox:get_price",
    ),
    "boom": ("Always fails.", {"text": {"type": "string"}}, [], "python:toolbox:boom"),
    "hang": ("Never answers in time.", {"seconds": {"type": "number"}}, [], "python:toolbox:hang"),
    "flaky": ("Slow the first time.", {"key": {"type": "string"}}, ["key"], "python:toolbox:flaky"),
}


def write_mini_harness(root: Path) -> Path:
    """A small but complete harness: 2 skills, 4 tools, 3 prompt blocks, the built-in hooks."""
    (root / "prompts").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "harness.yaml").write_text(
        textwrap.dedent("""\
        name: mini
        version: "0.1"
        description: a test harness
        pipeline: [role, catalog, format]
        limits: {max_rounds: 4, max_retries: 2, reply_max_chars: 60, tool_timeout_s: 0.5}
        output:
          fallback_reply: "One moment please!"
        hooks:
          - name: input_guard
          - name: reply_schema
          - name: reply_length
          - name: grounded_claims
            config: {forbidden_phrases: ["guaranteed delivery"]}
          - name: tool_retry
            config: {retries: 1, backoff_s: 0.0, statuses: [timeout]}
        settings:
          refusal_reply: "Sorry, I could not read that comment."
        trusted_modules: [toolbox]  # tests/toolbox.py: the tools below bind to it
        """)
    )
    (root / "prompts" / "role.md").write_text(
        "You are {{ harness.name }}, a live host. Product: {{ product.name if product else 'none' }}."
    )
    (root / "prompts" / "catalog.md").write_text(
        "Skills:\n{% for s in skills %}- {{ s.name }}: {{ s.description }}\n{% endfor %}"
        "Tools:\n{% for t in tool_signatures_json %}{{ t }}\n{% endfor %}"
    )
    (root / "prompts" / "format.md").write_text(
        'Reply as <reply>{"{{ reply_field }}": "..."}</reply>, max {{ limits.reply_max_chars }} chars.'
    )
    for name, (desc, props, required, binding) in MINI_TOOLS.items():
        schema = {"type": "object", "properties": props, "required": required}
        import yaml

        (root / "tools" / f"{name}.yaml").write_text(
            yaml.safe_dump(
                {
                    "name": name,
                    "description": desc,
                    "parameters": schema,
                    "binding": binding,
                    "idempotent": name in ("hang", "flaky"),  # read-only: the retry tests may re-run them
                }
            )
        )
    for skill, desc in (("price-talk", "Use for price questions."), ("chit-chat", "Use for small talk.")):
        (root / "skills" / skill).mkdir(parents=True)
        (root / "skills" / skill / "SKILL.md").write_text(
            f"---\nname: {skill}\ndescription: {desc}\nmetadata:\n  version: '1'\n---\n"
            "1. Be brief.\n2. Use tools for numbers.\n"
        )
    return root


@pytest.fixture
def mini_harness_dir(tmp_path: Path) -> Path:
    return write_mini_harness(tmp_path / "mini")


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny matmuls on a busy 2-core machine: one torch thread is ~6x faster than two (no spinning).
    Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def save_tiny_llama(folder: Path, tokenizer: object, seed: int = 0, **overrides: Any) -> Path:
    """A tiny random Llama (hidden 32, 2 layers) for ``tokenizer``, saved with it into ``folder``.
    ``initializer_range`` 0.3 gives peaked logits: greedy choices far from ties, LoRA moves the loss fast.
    ``overrides``: other ``LlamaConfig`` values."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer.save_pretrained(folder)  # type: ignore[attr-defined]
    settings: dict[str, Any] = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "initializer_range": 0.3,
    }
    config = LlamaConfig(
        vocab_size=len(tokenizer),  # type: ignore[arg-type]
        eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
        pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
        bos_token_id=None,
        **(settings | overrides),
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def assert_concurrent_streams_match_serial(model: Any, prompts: list[list[dict[str, str]]], config: Any) -> None:
    """Streams started together on one model each carry their own ``Generation``: the text and
    token counts equal those of the same prompts generated one at a time (no shared state)."""
    import threading

    serial = [model.generate(p, config) for p in prompts]
    assert len({g.text for g in serial}) > 1  # different answers, so a mix-up would show
    got: dict[int, tuple[str, Any]] = {}
    barrier = threading.Barrier(len(prompts))

    def run(i: int) -> None:
        stream = model.stream(prompts[i], config)
        barrier.wait()
        got[i] = ("".join(stream), stream.generation)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, expected in enumerate(serial):
        text, generation = got[i]
        assert generation is not None and text == generation.text == expected.text
        assert (generation.prompt_tokens, generation.completion_tokens) == (
            expected.prompt_tokens,
            expected.completion_tokens,
        )
