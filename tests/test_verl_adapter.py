"""The verl adapter (:mod:`hat.train.verl_adapter`): HAT's reward row in verl's ``rm_scores``, the
estimator against :func:`hat.train.gdpo.decomposed_advantages`, the rollout server behind HAT's
``Model``, the agent-loop output, the dataset; with verl importable, the registrations and a run of
both through verl's own code.

verl pins an older transformers than the project, so it is never installed into the project venv.
The tests marked ``needs_verl`` look for it in a separate target folder (``$HAT_VERL_SITE``, default
``/tmp/verl_site``; how to fill it: ``docs/verl.md``) and skip when it is not there. Everything else
runs without verl: the mapping is pure numpy, and the server is a fake that replays what a simulator
policy wrote, so a rollout through it can be compared with one of the policy itself.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hat.env.episode import Episode
from hat.env.policies import policy_model
from hat.env.sim import simulate
from hat.errors import HatError, ModelError
from hat.harness.loader import load_harness
from hat.models.base import GenerationConfig
from hat.train import verl_adapter as va
from hat.train.datagen import datagen_episodes
from hat.train.datagen_config import DatagenConfig
from hat.train.gdpo import (
    decomposed_advantages,
    normalize_then_sum_advantages,
    plain_grpo_advantages,
    scatter_to_tokens,
)
from hat.train.rollouts import RolloutRunner
from test_datagen import build_tokenizer

VERL_SITE = Path(os.environ.get("HAT_VERL_SITE", "/tmp/verl_site"))
SEGMENTS = {"tool": ("tool_rationality", "skill_selection"), "reply": ("accuracy", "effectiveness")}
LAYOUT = va.RewardLayout(SEGMENTS)
A = 1 / math.sqrt(2)  # a group of two different rewards normalises to ±1/√2


@pytest.fixture(scope="module")
def verl() -> Iterator[Any]:
    """The adapter module with verl importable: VERL_SITE appended to sys.path (after the venv's own
    packages, so it only adds what the venv lacks) and the module reloaded so that its registrations
    run. Skips, saying why, when verl is not there or does not import."""
    if not (VERL_SITE / "verl").is_dir():
        pytest.skip(f"verl is not installed in {VERL_SITE} (set HAT_VERL_SITE; docs/verl.md says how to fill it)")
    if str(VERL_SITE) not in sys.path:
        sys.path.append(str(VERL_SITE))
    if va.VERL_IMPORT_ERROR is not None:
        importlib.reload(va)
    if va.VERL_IMPORT_ERROR is not None:
        pytest.skip(f"verl in {VERL_SITE} does not import: {va.VERL_IMPORT_ERROR}")
    yield va


# -- shared rollout material ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    """A training episode that needs a tool, the production harness, what two simulator policies
    wrote on it (one earns more than the other) and a tokenizer trained on those conversations."""
    episode = datagen_episodes(DatagenConfig(n_episodes=4, seed=1))[2]
    harness = load_harness("livestream")
    traces = {p: simulate(episode, harness, p) for p in ("oracle", "wrong-tool")}
    texts = [m["content"] for trace in traces.values() for m in trace.to_messages()]
    return {
        "episode": episode,
        "harness": harness,
        "outputs": {p: [r.raw_output for r in t.rounds] for p, t in traces.items()},
        "tokenizer": build_tokenizer(texts, vocab_size=2000),
    }


class FakeServer:
    """verl's ``LLMServerClient.generate`` replaying scripted outputs as token ids (+ end of turn)."""

    def __init__(self, tokenizer: Any, outputs: Sequence[str], *, steps: int = 3, aborted: bool = False) -> None:
        self.tokenizer, self.outputs, self.steps, self.aborted = tokenizer, list(outputs), steps, aborted
        self.calls: list[dict[str, Any]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params)})
        if self.aborted:
            return SimpleNamespace(token_ids=[], stop_reason="aborted", extra_fields={})
        text = self.outputs[len(self.calls) - 1]
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        extra = {"min_global_steps": self.steps, "max_global_steps": self.steps + 1, "num_cached_tokens": 7}
        return SimpleNamespace(token_ids=ids, stop_reason="completed", extra_fields=extra)


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


def _server_rollout(world: dict[str, Any], policy: str, index: int = 0) -> tuple[Any, FakeServer, va.ServerModel]:
    server = FakeServer(world["tokenizer"], world["outputs"][policy])

    async def main() -> Any:
        model = va.ServerModel(server.generate, asyncio.get_running_loop(), world["tokenizer"], SAMPLING)
        settings = va.VerlSettings(hsa_prob=0.0)
        rollout = await va.run_rollout(world["episode"], model, settings, step=5, index=index, group_size=2)
        return rollout, model

    rollout, model = asyncio.run(main())
    return rollout, server, model


# -- (a) the reward row and the estimator, without verl --------------------------------------------
def _batch(rollouts: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A verl-shaped batch: float32 reward rows (right-padded with 0), response masks, uids."""
    rows = [LAYOUT.encode(r["segments"], r["rewards"], r["cot"], r["q"], _score(r)) for r in rollouts]
    width = max(map(len, rows)) + 3
    rewards = np.zeros((len(rows), width), dtype=np.float32)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, (row, r) in enumerate(zip(rows, rollouts, strict=True)):
        rewards[i, : len(row)] = row
        mask[i, : len(r["segments"])] = [int(bool(s)) for s in r["segments"]]
    return rewards, mask, [r["uid"] for r in rollouts]


def _rollout(uid: str, segments: str, tr: float, ss: float, acc: float, eff: float, **cot: float) -> dict[str, Any]:
    """``segments``: one letter per conversation token — t(ool), r(eply), . (no segment); ``cot``:
    q(L) per segment (the whole rollout's q is their mean)."""
    labels = [{"t": "tool", "r": "reply", ".": ""}[c] for c in segments]
    rewards = {"tool_rationality": tr, "skill_selection": ss, "accuracy": acc, "effectiveness": eff}
    return {"uid": uid, "segments": labels, "rewards": rewards, "cot": cot, "q": sum(cot.values()) / 2}


def _score(r: dict[str, Any]) -> float:
    return sum(0.0 if math.isnan(v) else v for v in r["rewards"].values()) - 0.1 * r["q"]


# three groups, rows interleaved as verl may hand them over; g "b" scores the same everywhere (all
# zero), a "c" rollout calls no tool (its tool rewards still count), one reward is NaN (not scored)
HAND_MADE = [
    _rollout("a", "tt..rr", 1.0, 0.5, 1.0, 0.0, tool=0.2),
    _rollout("b", "t.r", 1.0, 1.0, 1.0, 1.0),
    _rollout("a", "t.rrr", 0.0, 0.5, 0.5, 1.0, tool=0.7, reply=0.1),
    _rollout("c", "rr", 0.0, 0.0, 1.0, float("nan")),
    _rollout("b", "tt.r", 1.0, 1.0, 1.0, 1.0),
    _rollout("c", "t..rrrr", 1.0, 1.0, 0.0, 0.5, reply=1.0),
    _rollout("a", "r", 0.5, 0.0, 0.0, 1.0),
    _rollout("c", "tr", 0.5, 1.0, 0.5, 1.0),
]


def test_reward_row_round_trips_and_sums_to_the_score() -> None:
    r = HAND_MADE[2]
    row = LAYOUT.encode(r["segments"], r["rewards"], r["cot"], 0.4, 1.25)
    assert LAYOUT.trailer == 1 + 4 + 2 + 1 + 1 and len(row) == len(r["segments"]) + LAYOUT.trailer
    assert row[:5] == [1.0, 0.0, 2.0, 2.0, 2.0] and row[5] == va.MARKER  # codes: tool 1, reply 2, none 0
    assert row[6:13] == [0.0, 0.5, 0.5, 1.0, 0.7, 0.1, 0.4]  # dims in segment order, q(L) per segment, q(L)
    assert math.isclose(float(np.float32(row).sum()), 1.25, abs_tol=1e-5)  # verl's score metric = the scalar
    record = LAYOUT.decode(np.float32([*row, 0.0, 0.0]))  # right padding is ignored
    assert record.segments == r["segments"] and record.cot_q == pytest.approx({"tool": 0.7, "reply": 0.1})
    assert record.rewards == pytest.approx(r["rewards"]) and record.q_total == pytest.approx(0.4)


def test_token_advantages_equal_decomposed_advantages_scattered_to_segments() -> None:
    rewards, mask, uids = _batch(HAND_MADE)
    got = va.token_advantages(rewards, mask, uids, LAYOUT, lam=0.1, eps=1e-6)

    f32 = lambda xs: [float(np.float32(x)) for x in xs]  # noqa: E731  (the row is float32)
    per_dim = {d: f32(r["rewards"][d] for r in HAND_MADE) for d in LAYOUT.dims}
    cot = {s: f32(r["cot"].get(s, 0.0) for r in HAND_MADE) for s in SEGMENTS}
    groups = [{"a": 0, "b": 1, "c": 2}[u] for u in uids]
    values = decomposed_advantages(per_dim, groups, SEGMENTS, cot, lam=0.1, eps=1e-6)
    expected, drop = scatter_to_tokens(values, [r["segments"] for r in HAND_MADE])
    assert got.shape == rewards.shape
    np.testing.assert_allclose(got[:, : expected.shape[1]], expected, atol=1e-6)
    assert not got[:, expected.shape[1] :].any()  # trailer and padding carry nothing
    assert not got[mask == 0].any()  # neither does a token the policy did not write
    assert drop.tolist() == [False, True, False, False, True, False, False, False]  # group b: no signal
    assert got[3].any() and got[0, 0] != got[0, 4]  # segments of one rollout get their own values


def test_token_advantages_by_hand_on_a_group_of_two() -> None:
    # tool_rationality 1 vs 0 → ±1/√2; everything else equal → 0. Over the batch, std(±1/√2) = 1.
    better = _rollout("g", "t.r", 1.0, 0.0, 1.0, 1.0)
    worse = _rollout("g", "r", 0.0, 0.0, 1.0, 1.0)  # no tool call: its tool value reaches no token
    got = va.token_advantages(*_batch([better, worse]), LAYOUT, lam=0.1, eps=0.0)
    assert got[0, :3] == pytest.approx([A, 0.0, 0.0]) and not got[1].any()


@pytest.mark.parametrize("kind", ["grpo", "normalize_then_sum"])
def test_ablations_give_every_policy_token_the_sequence_value(kind: str) -> None:
    rewards, mask, uids = _batch(HAND_MADE)
    got = va.token_advantages(rewards, mask, uids, LAYOUT, lam=0.1, kind=kind)
    summed = {d: [float(np.float32(r["rewards"][d])) for r in HAND_MADE] for d in LAYOUT.dims}
    summed["q"] = [float(np.float32(r["q"])) for r in HAND_MADE]
    aggregate = {"grpo": plain_grpo_advantages, "normalize_then_sum": normalize_then_sum_advantages}[kind]
    value = aggregate(summed, [{"a": 0, "b": 1, "c": 2}[u] for u in uids], {"q": -0.1}, 1e-6)
    np.testing.assert_allclose(got, value[:, None] * mask, atol=1e-6)
    if kind == "grpo":  # group b scores the same on rows of different lengths: exactly zero (summing
        # the float32 row instead, as verl's own grpo estimator would, leaves a residue eps blows up)
        assert not got[[1, 4]].any()
    with pytest.raises(HatError, match="advantage"):
        va.VerlSettings(advantage="ppo")


def test_rows_not_in_the_layout_are_refused_with_the_cause() -> None:
    legacy = np.zeros((1, 6), dtype=np.float32)
    legacy[0, -1] = 2.0  # verl's own placement: the scalar on the last token (the legacy trainer)
    with pytest.raises(HatError, match="use_v1"):
        va.token_advantages(legacy, np.ones_like(legacy), ["u"], LAYOUT)
    row = np.float32([LAYOUT.encode(["tool", "reply"], HAND_MADE[0]["rewards"], {}, 0.0, 1.0)])
    kl = row - np.float32([[0.01, 0.02] + [0.0] * (row.shape[1] - 2)])  # a KL penalty rewrote the codes
    with pytest.raises(HatError, match="use_kl_in_reward"):
        va.token_advantages(kl, np.ones_like(kl), ["u"], LAYOUT)
    with pytest.raises(HatError, match="no complete record"):
        LAYOUT.decode(row[0, :-1])  # the trailer was cut
    with pytest.raises(HatError, match="segment"):
        LAYOUT.encode(["think"], HAND_MADE[0]["rewards"], {}, 0.0, 0.0)


def test_settings_come_from_the_algorithm_block() -> None:
    defaults = va.VerlSettings.from_config(None)
    assert defaults == va.VerlSettings() and defaults.layout.dims == LAYOUT.dims
    algorithm = {
        "adv_estimator": va.ESTIMATOR_NAME,
        "hat": {"cot_lambda": 0.2, "segment_dims": {"reply": ["accuracy"]}},
    }
    settings = va.VerlSettings.from_config(algorithm)
    assert settings.cot_lambda == 0.2 and settings.layout.segment_dims == {"reply": ("accuracy",)}
    with pytest.raises(HatError, match="unknown key"):
        va.VerlSettings.from_config({"hat": {"lambda": 0.1}})


# -- the rollout server behind HAT's Model ---------------------------------------------------------
def test_a_rollout_through_the_server_equals_the_policys_own(world: dict[str, Any]) -> None:
    rollout, server, model = _server_rollout(world, "oracle", index=1)
    runner = RolloutRunner(world["harness"], va._harness_and_envelope(va.VerlSettings())[1], hsa_prob=0.0)
    job = runner.plan([world["episode"]], 2, 5, offset=1)[0]
    direct = runner.run([job], lambda j: policy_model("oracle", j.episode, j.harness), world["tokenizer"])
    assert rollout.job.kind == "production" and (rollout.job.group, rollout.job.index) == (0, 1)
    assert [r.raw_output for r in rollout.trace.rounds] == [r.raw_output for r in direct[0].trace.rounds]
    assert rollout.tokens == direct[0].tokens and rollout.rewards == direct[0].rewards
    # every request the server saw is a prefix of the tokens trained on: sampled and trained contexts agree
    full = rollout.tokens.prompt_ids + rollout.tokens.completion_ids
    assert server.calls[0]["prompt_ids"] == rollout.tokens.prompt_ids
    assert all(full[: len(c["prompt_ids"])] == c["prompt_ids"] for c in server.calls)
    assert len(server.calls) == len(rollout.trace.rounds) > 1 and len({c["request_id"] for c in server.calls}) == 1
    params = server.calls[0]["params"]
    assert params["max_tokens"] == world["harness"].limits.max_new_tokens and params["stop"] == ["</reply>"]
    assert params["top_k"] == -1 and params["temperature"] == 1.0 and params["logprobs"] is False
    assert model.global_steps and min(model.global_steps) == 3 and max(model.global_steps) == 4


def test_server_model_cuts_stops_and_fails_on_an_aborted_request(world: dict[str, Any]) -> None:
    tokenizer = world["tokenizer"]
    messages = [{"role": "user", "content": "hi"}]
    config = GenerationConfig(max_new_tokens=50, stop=("</reply>",))

    async def call(server: FakeServer) -> Any:
        model = va.ServerModel(server.generate, asyncio.get_running_loop(), tokenizer, SAMPLING)
        return await asyncio.get_running_loop().run_in_executor(None, model.generate, messages, config)

    generation = asyncio.run(call(FakeServer(tokenizer, ["<reply>ok</reply> and more"])))
    assert generation.text == "<reply>ok" and generation.finish_reason == "stop" and generation.cached_tokens == 7
    with pytest.raises(ModelError, match="aborted"):
        asyncio.run(call(FakeServer(tokenizer, [], aborted=True)))


# -- the agent-loop output -------------------------------------------------------------------------
def test_loop_fields_carry_the_conversation_mask_and_reward_row(world: dict[str, Any]) -> None:
    rollout, _, _ = _server_rollout(world, "oracle")
    tokens, trailer = rollout.tokens, LAYOUT.trailer
    fields = va.loop_fields(rollout, LAYOUT, 0.1, prompt_length=4096, response_length=4096, pad_id=0)
    assert fields.prompt_ids == tokens.prompt_ids
    assert fields.response_ids == tokens.completion_ids + [0] * trailer
    assert fields.response_mask == tokens.env_mask + [0] * trailer and 0 in tokens.env_mask
    assert fields.reward_score == pytest.approx(sum(rollout.rewards.values()) - 0.1 * rollout.q_total)
    record = LAYOUT.decode(np.float32(fields.token_rewards))
    assert record.segments == tokens.segments and record.rewards == rollout.rewards
    assert record.cot_q == pytest.approx(rollout.cot_q) and record.q_total == pytest.approx(rollout.q_total)
    assert float(np.float32(fields.token_rewards).sum()) == pytest.approx(fields.reward_score, abs=1e-4)
    assert fields.reward_extra_info["accuracy"] == rollout.rewards["accuracy"] and fields.reward_extra_info["hsa"] == 0
    short = va.loop_fields(rollout, LAYOUT, 0.1, prompt_length=4096, response_length=10 + trailer, pad_id=0)
    assert (
        len(short.response_ids) == 10 + trailer and LAYOUT.decode(short.token_rewards).segments == tokens.segments[:10]
    )
    with pytest.raises(HatError, match="prompt_length"):
        va.loop_fields(rollout, LAYOUT, 0.1, prompt_length=8, response_length=4096, pad_id=0)


# -- the dataset -----------------------------------------------------------------------------------
def test_dataset_rows_carry_the_episode_and_prepare_writes_parquet(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    episodes = datagen_episodes(DatagenConfig(n_episodes=2, seed=1))
    rows = va.dataset_rows(episodes)
    assert [r["agent_name"] for r in rows] == [va.AGENT_LOOP_NAME] * 2 and rows[1]["extra_info"]["index"] == 1
    assert va._episode(rows[0]) == episodes[0] and rows[0]["prompt"][0]["content"] == "\n".join(episodes[0].comments)
    with pytest.raises(HatError, match="hat_episode"):
        va._episode({"extra_info": {}})
    assert va.main(["--out", str(tmp_path), "--train", "3", "--val", "2", "--seed", "1"]) == 0
    train, val = (pq.read_table(tmp_path / f"{s}.parquet").to_pylist() for s in ("train", "val"))
    assert len(train) == 3 and len(val) == 2
    ids = [{Episode.from_dict(json.loads(r["extra_info"]["hat_episode"])).episode_id for r in t} for t in (train, val)]
    assert not ids[0] & ids[1]  # validation worlds are not training worlds


# -- (b) with verl ---------------------------------------------------------------------------------
needs_verl = pytest.mark.usefixtures("verl")


@needs_verl
def test_estimator_and_agent_loop_are_registered_with_verl(verl: Any) -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    assert get_adv_estimator_fn(va.ESTIMATOR_NAME) is verl.hat_segment_gdpo_advantage
    assert _agent_loop_registry[va.AGENT_LOOP_NAME] == {"_target_": "hat.train.verl_adapter.HatAgentLoop"}


@needs_verl
def test_estimator_runs_in_verls_compute_advantage(verl: Any) -> None:
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, uids = _batch(HAND_MADE)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.from_numpy(rewards), "response_mask": torch.from_numpy(mask)},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    algorithm = OmegaConf.create({"adv_estimator": va.ESTIMATOR_NAME, "hat": {"cot_lambda": 0.1}})
    OmegaConf.set_struct(algorithm, True)  # as hydra hands it over
    out = compute_advantage(data, adv_estimator=va.ESTIMATOR_NAME, config=algorithm)
    expected = va.token_advantages(rewards, mask, uids, LAYOUT, lam=0.1)
    assert out.batch["advantages"].dtype == torch.float32
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, atol=1e-6)
    assert torch.equal(out.batch["returns"], out.batch["advantages"])


@needs_verl
def test_agent_loop_runs_a_group_and_its_rows_feed_the_estimator(verl: Any, world: dict[str, Any]) -> None:
    import hydra
    import torch
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"n": 2, "prompt_length": 4096, "response_length": 4096}},
            "algorithm": {"adv_estimator": va.ESTIMATOR_NAME, "hat": {"hsa_prob": 0.0}},
            "data": {},
        }
    )
    row = va.dataset_rows([world["episode"]])[0]

    async def session(index: int, policy: str) -> Any:
        loop = hydra.utils.instantiate(  # as verl's AgentLoopWorker builds it
            _agent_loop_registry[va.AGENT_LOOP_NAME],
            trainer_config=DictConfigWrap(config),
            server_manager=FakeServer(world["tokenizer"], world["outputs"][policy]),
            tokenizer=world["tokenizer"],
            processor=None,
            hf_model_type=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        kwargs = {"raw_prompt": row["prompt"], "extra_info": row["extra_info"], "uid": "u1", "global_steps": 3}
        return await loop.run(dict(SAMPLING), session_id=index, **kwargs)

    async def group() -> list[Any]:
        return list(await asyncio.gather(session(0, "oracle"), session(1, "wrong-tool")))

    outputs = asyncio.run(group())
    assert [type(o).__name__ for o in outputs] == ["HatAgentLoopOutput"] * 2
    assert outputs[0].reward_score > outputs[1].reward_score
    assert outputs[0].extra_fields["min_global_steps"] == 3 and outputs[0].extra_fields["max_global_steps"] == 4
    stored = [o.as_dict() for o in outputs]  # what verl's v1 worker puts into its TransferQueue
    assert all(
        float(d["rm_scores"].sum()) == pytest.approx(o.reward_score, abs=1e-4)
        for d, o in zip(stored, outputs, strict=True)
    )
    assert all(len(d["rm_scores"]) == len(d["responses"]) == len(d["response_mask"]) for d in stored)
    width = max(len(d["responses"]) for d in stored)
    padded = {  # verl's to_padded_tensor
        key: torch.stack([torch.nn.functional.pad(d[key], (0, width - len(d[key]))) for d in stored])
        for key in ("rm_scores", "response_mask")
    }
    rewards, mask = padded["rm_scores"], padded["response_mask"]
    uids = np.array(["u1", "u1"], dtype=object)
    advantages, _ = verl.hat_segment_gdpo_advantage(rewards, mask, index=uids, config=config.algorithm)
    assert (advantages[0][mask[0] == 1] > 0).any() and (advantages[1][mask[1] == 1] < 0).any()
    assert not advantages[mask == 0].any()


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "verl"


def _compose(overrides: Sequence[str], validate: bool = True) -> Any:
    """scripts/verl/hat_rl.yaml composed with ``overrides`` as ``verl.trainer.main_ppo`` composes it,
    and checked by verl's own ``validate_config`` (which needs vLLM installed once LoRA is on)."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_dir(config_dir=str(SCRIPTS), version_base=None):
        config = compose(config_name="hat_rl", overrides=list(overrides))
    if validate:
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


@needs_verl
def test_run_config_composes_on_verls_and_sets_what_the_adapter_needs(verl: Any) -> None:
    import yaml
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    config = _compose(["data.train_files=/d/train.parquet", "data.val_files=/d/val.parquet"])
    assert config.algorithm.adv_estimator == va.ESTIMATOR_NAME and config.algorithm.use_kl_in_reward is False
    assert config.trainer.use_v1 is True and config.reward.reward_model.enable is False
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == va.AGENT_LOOP_NAME
    assert config.actor_rollout_ref.rollout.calculate_log_probs is False
    assert config.actor_rollout_ref.rollout.name == "vllm" and config.actor_rollout_ref.actor.strategy == "fsdp"
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "hat.train.verl_adapter"
    assert va.VerlSettings.from_config(config.algorithm) == va.VerlSettings(
        rollout_threads=64, segment_dims=SEGMENTS
    )  # the YAML states hat train rl's defaults
    # every other key is one of verl's own (a typo would silently add a key verl never reads)
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        base = compose(config_name="ppo_trainer")
    raw = yaml.safe_load((SCRIPTS / "hat_rl.yaml").read_text(encoding="utf-8"))

    def leaves(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]

    ours = {"algorithm.hat.", "ray_kwargs.ray_init.runtime_env.env_vars."}
    keys = [k for top in set(raw) - {"hydra", "defaults"} for k in leaves(raw[top], f"{top}.")]
    for key in keys:
        parent, _, last = key.rpartition(".")
        if not any(key.startswith(o) for o in ours):
            assert last in set(OmegaConf.select(base, parent).keys()), f"{key} is not a verl 0.9.1 config key"


@pytest.mark.slow
@needs_verl
def test_run_script_writes_the_data_and_launches_verl_with_a_valid_config(verl: Any, tmp_path: Path) -> None:
    calls = tmp_path / "verl-args.txt"
    fake = tmp_path / "python"  # the interpreter the script runs: records the verl launch, runs the rest
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = -m ] && [ "$2" = verl.trainer.main_ppo ]; then shift 2\n'
        f'  printf "%s\\n" "$VERL_USE_EXTERNAL_MODULES" "$@" > {calls}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(VERL_SITE)])),
        "NGPUS": "2",
        "DATA": "data",
        "OUT": "out",
        "N_TRAIN": "3",
        "N_VAL": "2",
        "ADAPTER": str(adapter),
        "OMP_NUM_THREADS": "1",
        "VERL_USE_EXTERNAL_MODULES": "hat.train.verl_adapter",  # exported already: data preparation still works
    }
    script = SCRIPTS / "run_hat_rl.sh"
    run = subprocess.run(
        ["bash", str(script), "trainer.total_epochs=2"],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    exported, *args = calls.read_text().splitlines()
    assert exported == "hat.train.verl_adapter"
    assert args[:2] == [f"--config-path={SCRIPTS}", "--config-name=hat_rl"] and args[-1] == "trainer.total_epochs=2"
    data = tmp_path / "data"
    assert f"data.train_files={data / 'train.parquet'}" in args  # absolute: Ray workers have another cwd
    assert {"trainer.n_gpus_per_node=2", "actor_rollout_ref.model.lora_rank=8"} <= set(args)
    pq = pytest.importorskip("pyarrow.parquet")
    assert pq.read_table(data / "train.parquet").num_rows == 3
    _compose([a for a in args[2:] if ".lora_" not in a])  # valid for verl (its LoRA check needs vLLM)
    config = _compose(args[2:], validate=False)
    assert config.actor_rollout_ref.model.lora_alpha == 16 and config.trainer.default_local_dir == str(tmp_path / "out")


@pytest.mark.slow
@needs_verl
def test_verl_imports_the_adapter_through_its_external_modules_hook(verl: Any) -> None:
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        f"assert get_adv_estimator_fn({va.ESTIMATOR_NAME!r}).__module__ == 'hat.train.verl_adapter'\n"
        f"assert {va.AGENT_LOOP_NAME!r} in _agent_loop_registry\n"
        "print('registered')\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "hat.train.verl_adapter", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(VERL_SITE)]))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and "registered" in run.stdout, run.stderr[-2000:]
