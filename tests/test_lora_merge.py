"""Sampling from a LoRA policy through merged, swapped weights (hat.train.lora_merge)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from hat.train.lora_merge import mergeable_lora_layers, merged_lora  # noqa: E402


def _policy(adapter: bool = True, **lora: Any) -> Any:
    """A tiny random Llama with an ``all-linear`` LoRA adapter whose B is not zero (a trained one)."""
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    if not adapter:
        return model.eval()
    settings = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "lora_dropout": 0.0} | lora
    policy = peft.get_peft_model(model, peft.LoraConfig(**settings))
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    return policy.eval()


def _frozen(policy: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in policy.named_parameters() if not v.requires_grad}


def test_merged_weights_give_the_adapters_logits_and_come_back_bit_for_bit() -> None:
    policy = _policy()
    ids = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(1))
    frozen = _frozen(policy)
    trainable = {k for k, v in policy.named_parameters() if v.requires_grad}
    with torch.no_grad():
        before = policy(input_ids=ids).logits
        with merged_lora(policy) as merged:
            assert merged
            assert mergeable_lora_layers(policy) is None  # inside, the adapters are off
            inside = policy(input_ids=ids).logits
            layer = policy.base_model.model.model.layers[0].self_attn.q_proj  # its base holds W + ΔW
            w = frozen["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
            torch.testing.assert_close(layer.base_layer.weight, w + layer.get_delta_weight("default"))
        after = policy(input_ids=ids).logits
    assert float((inside - before).abs().max()) > 0  # one matmul over W + ΔW, not W·x + s·B(A·x)
    torch.testing.assert_close(inside, before, rtol=1e-5, atol=1e-5)
    assert torch.equal(after, before)
    for name, value in _frozen(policy).items():
        assert torch.equal(value, frozen[name]), name
    assert {k for k, v in policy.named_parameters() if v.requires_grad} == trainable


def test_the_weights_come_back_when_the_block_raises() -> None:
    policy = _policy()
    frozen = _frozen(policy)
    with pytest.raises(RuntimeError, match="mid-rollout"), merged_lora(policy):
        raise RuntimeError("mid-rollout")
    for name, value in _frozen(policy).items():
        assert torch.equal(value, frozen[name]), name
    assert mergeable_lora_layers(policy) is not None  # adapters enabled again


@pytest.mark.parametrize("case", ["dora", "no adapter", "disabled"])
def test_models_it_cannot_merge_exactly_are_left_as_they_are(case: str) -> None:
    policy = _policy(adapter=case != "no adapter", use_dora=case == "dora")
    ids = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(2))
    disabled = policy.disable_adapter() if case == "disabled" else contextlib.nullcontext()
    with torch.no_grad(), disabled:
        before = policy(input_ids=ids).logits
        with merged_lora(policy) as merged:
            inside = policy(input_ids=ids).logits
    assert not merged
    assert torch.equal(inside, before)
