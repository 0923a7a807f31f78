"""``hat train rl``: rollouts through the runtime → tokens and segments, the coin flip, token-level
advantages in TRL's PPO-clip loss, a tiny-model RL step, diagnostics, config and CLI.

A tiny random Llama (``conftest.save_tiny_llama``) and a byte-level BPE tokenizer trained here
keep every step to a second or two on CPU. Rollouts that must differ in reward come from simulator
policies (the oracle vs. one that calls the wrong tool) through the real runtime, with the tiny
model as the policy being trained; one test samples from the tiny model itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hat.augment import load_envelope
from hat.env.episode import Episode
from hat.env.policies import policy_model
from hat.env.sim import simulate
from hat.errors import HatError
from hat.harness.loader import load_harness
from hat.harness.runtime import Agent, Request
from hat.models.base import Model
from hat.models.scripted import ScriptedModel
from hat.train.datagen import RecordingModel, recorded_conversation
from hat.train.datagen_config import DatagenConfig
from hat.train.gdpo import scatter_to_tokens
from hat.train.rollouts import RolloutJob, RolloutRunner, rollout_tokens
from test_datagen import build_tokenizer

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from transformers import TrainerCallback  # noqa: E402

from hat.train.gdpo import segment_advantages  # noqa: E402
from hat.train.rl import (  # noqa: E402  (after the importorskip of TRL)
    DIAGNOSTICS_FILE,
    build_rl_trainer,
    cot_bands,
    load_policy,
    plot_diagnostics,
    train_rl,
    without_inert_rows,
)
from hat.train.rl_config import HatRLConfig  # noqa: E402
from hat.train.rl_packing import pack_prompt_groups  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _episodes() -> list[Episode]:
    """Two training episodes that need a tool (product Q&A, clarification): the oracle's rollouts and
    the wrong-tool policy's then differ in reward."""
    from hat.train.datagen import datagen_episodes

    return datagen_episodes(DatagenConfig(n_episodes=4, seed=1))[2:]


def _mixed(job: RolloutJob) -> Model:
    """Rollout 0 of a group: the oracle; the others: a policy that calls a tool of the wrong function."""
    return policy_model("oracle" if job.index == 0 else "wrong-tool", job.episode, job.harness, seed=job.seed)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import save_tiny_llama

    episodes = _episodes()
    production = load_harness("livestream")
    texts = [
        m["content"]
        for e in episodes
        for p in ("oracle", "wrong-tool")
        for m in simulate(e, production, p).to_messages()
    ]
    tokenizer = build_tokenizer(texts, vocab_size=2000)
    folder = save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
    return {"episodes": episodes, "folder": folder, "tokenizer": tokenizer}


def _config(out: Path, model: Path | str, **changes: Any) -> HatRLConfig:
    fields: dict[str, Any] = {
        "output_dir": str(out),
        "model": str(model),
        "num_generations": 2,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_steps": 1,
        "learning_rate": 5e-2,
        "save_steps": 1000,
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
        "use_cpu": True,
        "seed": 0,
    }
    return HatRLConfig(**{**fields, **changes})


def _trainable(trainer: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}


# -- rollout → tokens ----------------------------------------------------------------------------
CALL = (
    "<think>A price question; look it up.</think>\n"
    '<tool_call>{"name": "get_price", "arguments": {"product": "mug"}}</tool_call>'
)
REPLY = '<think>Answer now.</think>\n<reply>{"reply": "Thanks for asking!"}'


def test_rollout_tokens_label_each_segment_on_a_scripted_trace(mini_harness_dir: Path) -> None:
    harness = load_harness(str(mini_harness_dir))
    recorder = RecordingModel(ScriptedModel([CALL, "no protocol here", REPLY]))
    trace = Agent(harness, recorder).respond(Request.of("how much is the mug?")).trace
    assert [r.action for r in trace.rounds] == ["tool_calls", "invalid", "reply"]
    messages = recorded_conversation(recorder, trace)
    tokenizer = build_tokenizer([m["content"] for m in messages], vocab_size=400)
    tokens = rollout_tokens(messages, trace.rounds, tokenizer)

    def text(segment: str, thinking: bool | None = None) -> str:
        picked = [
            i
            for i, s, r in zip(tokens.completion_ids, tokens.segments, tokens.reasoning, strict=True)
            if s == segment and (thinking is None or r == thinking)
        ]
        return str(tokenizer.decode(picked))

    # the prompt is the system and user turns up to the first assistant header; the completion ends at
    # the last policy turn's end-of-turn token
    prompt = tokenizer.decode(tokens.prompt_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "how much is the mug?" in prompt
    assert tokens.completion_ids[-1] == tokenizer.eos_token_id and tokens.segments[-1] == "reply"
    # tool segment: the tool round, its reasoning included, and its end-of-turn token
    assert text("tool") == CALL + "<|im_end|>"
    # reply segment: the malformed attempt and the reply (with the </reply> the runtime cut as a stop)
    assert text("reply") == "no protocol here<|im_end|>" + REPLY + "</reply><|im_end|>"
    # everything else — the tool observation, the feedback, the chat headers — belongs to no segment
    outside = text("")
    assert "<tool_response>" in outside and "Your output had no <tool_call>" in outside
    assert "<|im_start|>assistant\n" in outside and "get_price" not in outside.split("<tool_response>")[0]
    assert tokens.env_mask == [int(bool(s)) for s in tokens.segments]
    # reasoning: the text inside <think> (straddling BPE tokens included), counted per segment for q(L)
    assert "A price question; look it up." in text("tool", True) and "Answer now." in text("reply", True)
    assert "<tool_call>" not in text("tool", True)
    counts = tokens.reasoning_tokens()
    assert counts["tool"] == sum(s == "tool" and r for s, r in zip(tokens.segments, tokens.reasoning, strict=True))
    assert counts["tool"] > 0 and counts["reply"] > 0


def test_rollout_tokens_reject_a_conversation_without_the_rounds(mini_harness_dir: Path) -> None:
    harness = load_harness(str(mini_harness_dir))
    recorder = RecordingModel(ScriptedModel([REPLY]))
    trace = Agent(harness, recorder).respond(Request.of("hi")).trace
    messages = recorded_conversation(recorder, trace)
    tokenizer = build_tokenizer([m["content"] for m in messages], vocab_size=300)
    with pytest.raises(HatError, match="assistant turns"):
        rollout_tokens(messages[:-1], trace.rounds, tokenizer)


def test_a_rollout_without_policy_tokens_is_inert(mini_harness_dir: Path) -> None:
    harness = load_harness(str(mini_harness_dir))
    recorder = RecordingModel(ScriptedModel([]))  # the backend fails on the first call
    trace = Agent(harness, recorder).respond(Request.of("hi")).trace
    assert trace.status == "error"
    messages = recorded_conversation(recorder, trace)
    tokenizer = build_tokenizer([m["content"] for m in messages], vocab_size=300)
    tokens = rollout_tokens(messages, trace.rounds, tokenizer)
    assert tokens.completion_ids == [tokenizer.eos_token_id] and tokens.env_mask == [0]
    assert scatter_to_tokens({"reply": [1.0]}, [tokens.segments])[1].tolist() == [True]  # dropped


def test_ablations_give_every_segment_one_sequence_value() -> None:
    rewards = {"tool_rationality": [1.0, 0.0], "skill_selection": [1.0, 1.0], "accuracy": [1.0, 1.0]}
    segments = {"tool": ("tool_rationality", "skill_selection"), "reply": ("accuracy",)}
    cot, q_total = {"tool": [0.0, 0.0], "reply": [0.0, 0.0]}, [0.0, 0.0]
    decomposed = segment_advantages("segments", rewards, cot, q_total, [0, 0], segments, 0.1, 0.0)
    assert decomposed["reply"].tolist() == [0.0, 0.0] and decomposed["tool"][0] > 0
    for kind in ("grpo", "normalize_then_sum"):
        got = segment_advantages(kind, rewards, cot, q_total, [0, 0], segments, 0.1, 0.0)
        assert got["tool"].tolist() == got["reply"].tolist() and got["reply"][0] > 0  # credit reaches the reply
    with pytest.raises(HatError, match="unknown advantage"):
        segment_advantages("ppo", rewards, cot, q_total, [0, 0], segments, 0.1, 0.0)


# -- groups and the coin flip ---------------------------------------------------------------------
def test_coin_flip_picks_one_harness_per_group_and_uses_both_kinds() -> None:
    episodes = _episodes()
    runner = RolloutRunner(load_harness("livestream"), load_envelope("default"), hsa_prob=0.5, seed=3)
    kinds = []
    for step in range(6):
        jobs = runner.plan([e for e in episodes for _ in range(2)], 2, step)
        assert [(j.group, j.index) for j in jobs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        for a, b in (jobs[:2], jobs[2:]):  # one harness state and one episode per group, distinct seeds
            assert a.harness.content_hash() == b.harness.content_hash() and a.episode == b.episode
            assert a.seed != b.seed
        for job in jobs[::2]:
            kinds.append(job.kind)
            if job.kind == "hsa":
                assert "+hsa.train." in job.harness.version  # a train-split variant, never held out
    assert {"production", "hsa"} <= set(kinds)
    again = runner.plan([e for e in episodes for _ in range(2)], 2, 5)
    assert [j.harness.content_hash() for j in again] == [j.harness.content_hash() for j in jobs]  # seeded
    never = RolloutRunner(load_harness("livestream"), load_envelope("default"), hsa_prob=0.0)
    assert {j.kind for s in range(4) for j in never.plan(episodes, 1, s)} == {"production"}
    with pytest.raises(HatError, match="repeat one episode"):
        runner.plan(episodes, 2, 0)  # a group of two different episodes


# -- the RL step ----------------------------------------------------------------------------------
def test_rl_step_changes_lora_weights_and_writes_diagnostics(setup: dict[str, Any], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    out = tmp_path / "rl"
    config = _config(out, f"hf:{setup['folder']}", max_steps=2, hsa_prob=0.5)
    result = train_rl(config, episodes=setup["episodes"], policy=_mixed)
    assert result.global_step == 2 and result.adapter and result.base == str(Path(setup["folder"]).resolve())
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # LoRA B starts at zero: it moved
    rows = [json.loads(line) for line in (out / DIAGNOSTICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("rewards/tool_rationality/mean", "rewards/accuracy/mean", "hat/q", "hat/zero_adv_groups"):
            assert key in row
        assert "clip_ratio/region_mean" in row and 0.0 <= row["hat/zero_adv_groups"] <= 1.0
        assert sum(row[f"hat/cot_band/{b}"] for b in ("le100", "100-200", "gt200")) == pytest.approx(1.0)
    assert rows[0]["rewards/tool_rationality/mean"] < 1.0  # the wrong-tool rollouts score lower
    assert Path(result.plot).stat().st_size > 1000
    saved = HatRLConfig.from_yaml(out / "rl_config.yaml")
    assert saved.advantage == "segments" and saved.num_generations == 2
    # the adapter names its base so HAT's loader (and a further RL stage) can continue it
    adapter_base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert adapter_base == str(Path(setup["folder"]).resolve())
    model, _, base_ref, peft_config = load_policy(_config(tmp_path / "again", out))
    assert peft_config is None and base_ref == adapter_base
    assert any(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


def test_micro_batches_give_the_update_of_one_batch(setup: dict[str, Any], tmp_path: Path) -> None:
    """A step's rollouts trained as two micro-batches of two (gradient accumulation; TRL shuffles the
    generation batch before splitting it) move the weights as one batch of four does: the token
    advantages travel with their rows and the token normaliser spans the whole generation batch."""
    moved = []
    for batch, accum in ((4, 1), (2, 2)):
        config = _config(
            tmp_path / f"b{batch}",
            f"hf:{setup['folder']}",
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accum,
            optim="sgd",
            learning_rate=1.0,
            autocast_bf16=False,
        )
        trainer = build_rl_trainer(config, episodes=setup["episodes"], policy=_mixed)
        before = _trainable(trainer)
        trainer.train()
        after = _trainable(trainer)
        moved.append({k: after[k] - before[k] for k in before})
    assert any(float(d.abs().max()) > 1e-4 for d in moved[0].values())  # the step did move the weights
    for key, delta in moved[0].items():
        torch.testing.assert_close(moved[1][key], delta, rtol=1e-4, atol=1e-6)


def test_bf16_autocast_step_follows_float32(setup: dict[str, Any], tmp_path: Path) -> None:
    """The loss under bf16 autocast (LoRA deltas summed in float32) is float32's within bf16's
    rounding, and it moves the weights the same way."""
    runs = {}
    for bf16 in (False, True):
        config = _config(tmp_path / f"bf16-{bf16}", f"hf:{setup['folder']}", autocast_bf16=bf16, optim="sgd")
        trainer = build_rl_trainer(config, episodes=setup["episodes"], policy=_mixed)
        assert (trainer.autocast is not None) == bf16
        before = _trainable(trainer)
        output = trainer.train()
        after = _trainable(trainer)
        runs[bf16] = (output.training_loss, torch.cat([(after[k] - before[k]).flatten() for k in before]))
    (loss32, delta32), (loss16, delta16) = runs[False], runs[True]
    assert float(delta32.abs().max()) > 0
    assert abs(loss16 - loss32) <= 0.05 * abs(loss32) + 1e-3
    assert float(torch.nn.functional.cosine_similarity(delta16, delta32, dim=0)) > 0.95


def test_too_few_episodes_for_one_generation_batch_is_an_error(setup: dict[str, Any], tmp_path: Path) -> None:
    config = _config(
        tmp_path / "few", f"hf:{setup['folder']}", per_device_train_batch_size=2, gradient_accumulation_steps=4
    )
    with pytest.raises(HatError, match="needs at least 4 episodes"):  # 8 rollouts in groups of 2 = 4 episodes
        build_rl_trainer(config, episodes=setup["episodes"][:3], policy=_mixed)


def test_an_interrupted_run_resumes_to_the_same_weights_and_diagnostics(setup: dict[str, Any], tmp_path: Path) -> None:
    """Two steps straight vs. one step, a crash (the second checkpoint and the outputs lost, a torn
    diagnostics line) and ``--resume``: the same adapter bit for bit, the same diagnostics. The
    live tiny policy samples the rollouts, so the step-seeded sampling is part of what is checked."""
    from safetensors.torch import load_file

    def run(out: Path, **changes: Any) -> Any:
        config = _config(out, f"hf:{setup['folder']}", max_steps=2, save_steps=1, max_new_tokens=6, **changes)
        return train_rl(config, episodes=setup["episodes"])

    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    with pytest.raises(HatError, match="no checkpoint"):
        run(straight, resume_from_checkpoint="latest")
    run(straight)
    run(crashed)
    import shutil

    shutil.rmtree(crashed / "checkpoint-2")
    (crashed / "adapter_model.safetensors").unlink()
    diagnostics = crashed / DIAGNOSTICS_FILE
    diagnostics.write_text(diagnostics.read_text() + '{"step": 3, "torn', encoding="utf-8")
    steps: list[int] = []

    class Steps(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            steps.append(int(state.global_step))

    config = _config(crashed, f"hf:{setup['folder']}", max_steps=2, save_steps=1, max_new_tokens=6)
    config.resume_from_checkpoint = "latest"
    result = train_rl(config, episodes=setup["episodes"], callbacks=[Steps()])
    assert result.global_step == 2 and steps == [2]  # only the lost step was redone
    a, b = load_file(str(straight / "adapter_model.safetensors")), load_file(str(crashed / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [[json.loads(line) for line in (d / DIAGNOSTICS_FILE).read_text().splitlines()] for d in (straight, crashed)]
    assert [r["step"] for r in rows[1]] == [1, 2]
    for key in ("rewards/accuracy/mean", "hat/q", "hat/cot_tokens", "loss"):
        assert [r.get(key) for r in rows[0]] == [r.get(key) for r in rows[1]], key


def test_token_advantages_feed_trl_loss_and_lower_it_on_a_fixed_batch(setup: dict[str, Any], tmp_path: Path) -> None:
    config = _config(tmp_path / "out", setup["folder"], hsa_prob=0.0, beta=0.04)  # with the KL to the reference
    trainer = build_rl_trainer(config, episodes=setup["episodes"], policy=_mixed)
    rows = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    inputs = trainer._generate_and_score_completions(rows)
    assert "ref_per_token_logps" in inputs  # LoRA: the reference is the model without the adapter
    advantages = inputs["advantages"]
    mask = inputs["completion_mask"] * inputs["tool_mask"]
    assert advantages.shape == inputs["completion_ids"].shape  # per token, not per sequence
    assert torch.all(advantages[mask == 0] == 0)  # observations, headers, padding: no advantage
    for i, rollout in enumerate(trainer._rollouts):  # one value per segment, on that segment's tokens
        for segment in ("tool", "reply"):
            picked = [t for t, s in enumerate(rollout.tokens.segments) if s == segment]
            assert len({float(advantages[i, t]) for t in picked}) <= 1
    assert float(advantages.abs().sum()) > 0

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        old, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, inputs["completion_ids"].size(1)
        )
    inputs["old_per_token_logps"] = old
    trainer.current_gradient_accumulation_steps = 1
    optimizer = torch.optim.Adam([p for p in trainer.model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(4):
        loss = trainer.compute_loss(trainer.model, inputs)
        losses.append(float(loss.detach()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    final = float(trainer.compute_loss(trainer.model, inputs).detach())
    assert final < losses[0] - 1e-3, (losses, final)


def test_rows_without_loss_tokens_leave_the_pass_with_the_same_loss_and_gradients(
    setup: dict[str, Any], tmp_path: Path
) -> None:
    """Dropped sequences (all-zero advantages) are left out of the forward and backward pass and the
    micro-batch is trimmed to the kept rows' width: TRL's token-normalised loss and the LoRA
    gradients stay those of the full micro-batch; a micro-batch of dropped rows runs no pass."""
    config = _config(tmp_path / "out", setup["folder"], hsa_prob=0.0, autocast_bf16=False)  # float32: exact
    trainer = build_rl_trainer(config, episodes=setup["episodes"], policy=_mixed)
    trainer.model.train()
    inputs = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    trainer.current_gradient_accumulation_steps = 1
    lengths = (inputs["completion_mask"] * inputs["tool_mask"]).sum(dim=1)
    longest = int(lengths.argmax())
    inputs["tool_mask"][longest] = 0  # as _token_advantages marks a dropped sequence
    inputs["advantages"][longest] = 0
    trimmed = without_inert_rows(inputs, "dapo")
    assert trimmed is not None and trimmed["completion_ids"].shape[0] == lengths.numel() - 1
    assert trimmed["completion_ids"].shape[1] < inputs["completion_ids"].shape[1]  # the longest row's columns went
    assert without_inert_rows(inputs, "grpo")["completion_ids"].shape == inputs["completion_ids"].shape

    def loss_and_grads(skip: bool) -> tuple[float, dict[str, Any]]:
        trainer.skip_inert_rows = skip
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, dict(inputs))
        loss.backward()
        grads = {k: v.grad.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
        return float(loss.detach()), grads

    (full_loss, full), (kept_loss, kept) = loss_and_grads(False), loss_and_grads(True)
    assert abs(full_loss) > 0 and any(float(g.abs().max()) > 0 for g in full.values())
    assert kept_loss == pytest.approx(full_loss, rel=1e-4, abs=1e-6)
    for key, grad in full.items():
        torch.testing.assert_close(kept[key], grad, rtol=1e-4, atol=1e-6)

    inputs["tool_mask"].zero_()
    assert without_inert_rows(inputs, "dapo") is None
    loss = trainer.compute_loss(trainer.model, dict(inputs))
    assert float(loss) == 0.0 and loss.requires_grad


def test_rows_sharing_a_prompt_are_scored_packed_as_trl_scores_them_one_by_one(
    setup: dict[str, Any], tmp_path: Path
) -> None:
    """A group's prompt encoded once (block mask, continuing positions, TRL's fused head): the same
    per-token log-probabilities, entropies and LoRA gradients as TRL's per-row pass, and the
    micro-batches hold whole groups."""
    config = _config(tmp_path / "out", setup["folder"], hsa_prob=0.0, autocast_bf16=False)
    trainer = build_rl_trainer(config, episodes=setup["episodes"], policy=_mixed)
    trainer.model.train()
    trainer._step, trainer._buffered_inputs = 0, None
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].size(1)
    packs = pack_prompt_groups(ids, attention, width)
    assert packs is not None and [p.rows for p in packs] == [[0, 1], [2, 3]]  # G = 2: groups kept in order
    assert len(packs[0].ids) < sum(int(attention[r].sum()) for r in packs[0].rows)  # the prompt once

    def scored(share: bool) -> tuple[Any, Any, dict[str, Any]]:
        trainer.args.share_group_prompts = share
        trainer.model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, width, compute_entropy=True
        )
        (logps * inputs["completion_mask"]).sum().backward()
        grads = {k: v.grad.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
        return logps.detach(), entropies.detach(), grads

    (logps, entropies, grads), (ref_logps, ref_entropies, ref_grads) = scored(True), scored(False)
    mask = inputs["completion_mask"].bool()
    assert float(ref_logps[mask].abs().sum()) > 0
    torch.testing.assert_close(logps[mask], ref_logps[mask], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(entropies[mask], ref_entropies[mask], rtol=1e-4, atol=1e-4)
    assert float(logps[~mask].abs().sum()) == 0.0
    for key, grad in ref_grads.items():  # float32 sums over hundreds of tokens in another order
        torch.testing.assert_close(grads[key], grad, rtol=1e-4, atol=1e-5 * float(grad.abs().max()) + 1e-7)


def test_rollouts_sample_the_live_policy_weights(setup: dict[str, Any], tmp_path: Path) -> None:
    config = _config(tmp_path / "out", setup["folder"], max_new_tokens=6, hsa_prob=0.0)
    trainer = build_rl_trainer(config, episodes=setup["episodes"][:2])
    trainer.model.train()
    prompts = [setup["episodes"][0].episode_id] * 2

    def first_outputs() -> list[str]:
        trainer._rollout_func(prompts, trainer)
        return [r.trace.rounds[0].raw_output for r in trainer._rollouts]

    before = first_outputs()
    assert trainer.model.training  # generation switched to eval mode and back
    rollout = trainer._rollouts[0]
    assert rollout.trace.model == "policy" and rollout.job.kind == "production"
    written = [t for t, s in zip(rollout.tokens.completion_ids, rollout.tokens.segments, strict=True) if s]
    assert len(written) == sum(rollout.tokens.env_mask) > 0
    assert first_outputs() == before  # same weights, same sampling seeds: same rollouts
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param))
    assert first_outputs() != before  # the weights being trained are the weights sampled


def test_rollouts_of_a_step_decode_together_and_equal_rollouts_one_by_one(
    setup: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live policy's rollouts run batched (one thread each, sampled with per-rollout seeds);
    each draws what it draws when the rollouts run one after another."""
    import hat.train.rollouts as rollouts_module

    config = _config(tmp_path / "out", setup["folder"], max_new_tokens=12, hsa_prob=0.5)
    trainer = build_rl_trainer(config, episodes=setup["episodes"])
    trainer.model.train()
    prompts = [e.episode_id for e in setup["episodes"] for _ in range(2)]
    calls: list[int] = []
    batched_map = rollouts_module.map_batched

    def spy(model: Any, items: Any, fn: Any) -> Any:
        calls.append(len(items))
        return batched_map(model, items, fn)

    def rounds() -> list[Any]:
        trainer._rollout_func(prompts, trainer)
        return [([r.raw_output for r in x.trace.rounds], x.tokens.completion_ids, x.rewards) for x in trainer._rollouts]

    import hat.models.transformers_backend as backend_module

    sizes: list[int] = []
    decode = backend_module.decode_greedy

    def counted(model: Any, rows: Any, *args: Any, **kwargs: Any) -> None:
        sizes.append(len(rows))
        decode(model, rows, *args, **kwargs)

    monkeypatch.setattr(backend_module, "decode_greedy", counted)
    monkeypatch.setattr(rollouts_module, "map_batched", spy)
    together = rounds()
    assert calls == [4]  # all four rollouts of the step in one batched map
    assert max(sizes) > 1  # and their rounds really decoded as batches of sampled rows
    monkeypatch.setattr(rollouts_module, "map_batched", lambda model, items, fn: [fn(i, model) for i in items])
    assert rounds() == together
    assert len({tuple(r[0]) for r in together}) > 1  # the rollouts differ (sampled, per-rollout seeds)


def test_normalize_then_sum_matches_trl_arithmetic() -> None:
    from trl.trainer.utils import nanstd

    from hat.train.gdpo import normalize_then_sum_advantages

    rewards = {"a": [1.0, 0.0, 0.3, 0.3, 0.2, 0.9, 0.4, 0.1], "b": [0.5, 0.5, 1.0, 0.0, 0.7, 0.9, 0.0, 0.6]}
    # TRL's normalize_then_sum on (groups, G, funcs), in float64
    grouped = torch.tensor([rewards["a"], rewards["b"]], dtype=torch.float64).T.reshape(-1, 2, 2)
    normalised = (grouped - grouped.mean(1, keepdim=True)) / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)
    summed = normalised.reshape(-1, 2).nansum(1)
    expected = (summed - summed.mean()) / (nanstd(summed) + 1e-4)
    got = normalize_then_sum_advantages(rewards, [0, 0, 1, 1, 2, 2, 3, 3], eps=1e-4)
    # rel 1e-6: TRL's nanstd computes its Bessel factor count / (count − 1) in float32
    assert got.tolist() == pytest.approx(expected.tolist(), rel=1e-6, abs=1e-12)


# -- diagnostics, config, CLI ---------------------------------------------------------------------
def test_cot_bands_and_plot(tmp_path: Path) -> None:
    assert cot_bands([0, 100, 101, 200, 201, 900]) == {"le100": 2 / 6, "100-200": 2 / 6, "gt200": 2 / 6}
    path = tmp_path / DIAGNOSTICS_FILE
    rows = [{"step": s, "loss": -0.1 * s, "hat/q": 0.1, "rewards/accuracy/mean": 0.5} for s in (1, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_diagnostics(path)
    assert png.suffix == ".png" and png.read_bytes()[:4] == b"\x89PNG"
    path.write_text("")
    with pytest.raises(HatError, match="no diagnostics"):
        plot_diagnostics(path)


def test_config_defaults_yaml_roundtrip_and_validation(tmp_path: Path) -> None:
    from hat.train.rl_defaults import RL

    config = HatRLConfig(output_dir=str(tmp_path / "o"), model="hf:/some/policy", max_steps=3)
    assert config.model == "/some/policy" and config.bf16 is False and config.loss_type == "dapo"
    assert config.num_generations == RL.num_generations and config.advantage == "segments"
    loaded = HatRLConfig.from_yaml(config.save_yaml(tmp_path / "c.yaml"), advantage="grpo", hsa_prob=None)
    assert loaded.to_yaml_dict() == {**config.to_yaml_dict(), "advantage": "grpo"}
    for bad, message in (
        ({"advantage": "ppo"}, "advantage must be one of"),
        ({"hsa_prob": 1.5}, "hsa_prob"),
        ({"temperature": 0.0}, "temperature must be > 0"),
    ):
        with pytest.raises(HatError, match=message):
            HatRLConfig(output_dir=str(tmp_path / "o"), **bad)
    with pytest.raises(HatError, match="unknown RL config key"):
        HatRLConfig.from_dict({"group_size": 4})


def test_cli_options_state_the_config_defaults_and_need_an_output_folder(tmp_path: Path) -> None:
    import dataclasses

    from hat.cli.rl_cmd import RL_OPTIONS, rl_command
    from hat.train.rl_defaults import RL

    known = {f.name: f for f in dataclasses.fields(HatRLConfig) if f.init}
    for name, spec in RL_OPTIONS.options.items():
        assert spec.field in known, name
        if spec.field in dataclasses.asdict(RL):
            assert known[spec.field].default == getattr(RL, spec.field), spec.field
        elif not spec.required:
            assert RL_OPTIONS.help(name).endswith("(default: TRL's)")
    app = typer.Typer()
    app.command()(rl_command)
    shown = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert shown.exit_code == 0 and "--hsa-prob" in shown.output and "segments" in shown.output
    failed = CliRunner().invoke(app, ["--episodes", "2"])
    assert failed.exit_code != 0 and "--out" in failed.output
    bad = CliRunner().invoke(app, ["--out", str(tmp_path / "o"), "--advantage", "ppo"])
    assert bad.exit_code != 0 and "advantage must be one of" in bad.output


@pytest.mark.parametrize("lora", ["--lora", "--full"])
def test_cli_trains_the_live_policy_end_to_end(setup: dict[str, Any], tmp_path: Path, lora: str) -> None:
    from hat.cli.rl_cmd import rl_command

    app = typer.Typer()
    app.command()(rl_command)
    out = tmp_path / "cli"
    args = ["--model", f"hf:{setup['folder']}", "--out", str(out), "--episodes", "2", "--max-steps", "1", lora]
    args += ["-G", "2", "--batch-size", "2", "--grad-accum", "1", "--max-new-tokens", "4", "--threads", "1", "--json"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["global_step"] == 1 and result["advantage"] == "segments"
    assert result["adapter"] == (lora == "--lora")
    weights = "adapter_model.safetensors" if lora == "--lora" else "model.safetensors"
    assert (out / weights).is_file() and (out / "rl_result.json").is_file()
    assert (out / DIAGNOSTICS_FILE).is_file() and Path(result["plot"]).is_file()


def test_groups_are_laid_out_as_trl_repeats_prompts() -> None:
    # TRL's sampler yields G consecutive copies of each prompt; a process's slice starts at an offset
    episodes = _episodes()
    runner = RolloutRunner(load_harness("livestream"), load_envelope("default"), hsa_prob=0.0)
    jobs = runner.plan([episodes[1], episodes[1]], 4, step=0, offset=2)
    assert [(j.group, j.index) for j in jobs] == [(0, 2), (0, 3)]
    assert len({j.seed for j in jobs}) == 2
