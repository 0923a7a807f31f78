"""The judges as TRL reward functions: ``f(completions, **kwargs) -> list[float]``, pure.

TRL's ``GRPOTrainer`` calls each reward function with the batch's ``completions`` and every
dataset column as a keyword argument (one list entry per completion). The columns read here:

============  ========  ===================================================================
column        needed    per-sample value
============  ========  ===================================================================
``episode``   yes       :class:`~hat.env.episode.Episode` or its ``to_dict()`` form
``harness``   yes       a :class:`~hat.harness.state.Harness`, or a string for
                        :func:`~hat.harness.loader.load_harness` (built-in name or folder;
                        loaded once per string and cached)
``trace``     no        :class:`~hat.harness.trace.Trace` or its ``to_dict()`` form: the
                        rollout (multi-turn RL passes it). When absent or ``None``, a
                        single-round trace is parsed from the completion itself
``prompts``   no        TRL passes it; when the trace is built from the completion, the
                        prompt's system message (or the whole string prompt) is the
                        grounding text a reply's numbers may come from
============  ========  ===================================================================

A completion is a string or a conversational list of messages (the last assistant message is
used). A trace parsed from a completion has no tool results: its tool calls get status
``not_run`` (they count as calls for Tool Rationality, never as faults), and its status is
``ok`` for a ``<reply>``, ``incomplete`` for tool calls only and ``invalid`` otherwise.

Values: each judge's score in [0, 1], except :func:`cot_length_reward`, which is the report's raw
contribution ``−0.1·q(L)`` (use :func:`make_cot_reward` to count with a model's tokenizer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hat.env.episode import Episode
from hat.harness.loader import load_harness
from hat.harness.protocol import parse_output, strip_reasoning
from hat.harness.state import Harness
from hat.harness.trace import Round, ToolCallRecord, Trace
from hat.harness.types import CallStatus, TraceStatus
from hat.judge.accuracy import accuracy
from hat.judge.base import Judge
from hat.judge.cot import Tokenizer, cot_reward
from hat.judge.effectiveness import effectiveness
from hat.judge.skills import skill_selection
from hat.judge.tools import tool_rationality

__all__ = [
    "REWARD_FUNCS",
    "RewardFunc",
    "accuracy_reward",
    "cot_length_reward",
    "effectiveness_reward",
    "make_cot_reward",
    "resolve_harness",
    "reward_funcs",
    "skill_selection_reward",
    "tool_rationality_reward",
    "trace_from_completion",
]

RewardFunc = Callable[..., list[float]]


@functools.lru_cache(maxsize=32)
def _load(key: str) -> Harness:
    return load_harness(key)


def resolve_harness(value: Harness | str) -> Harness:
    if isinstance(value, Harness):
        return value
    if isinstance(value, str):
        return _load(value)
    raise TypeError(f"harness column holds {type(value).__name__}; pass a Harness or a harness name/folder string")


def _episode(value: Episode | Mapping[str, Any]) -> Episode:
    return value if isinstance(value, Episode) else Episode.from_dict(dict(value))


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        texts = [str(m.get("content", "")) for m in completion if isinstance(m, Mapping)]
        roles = [m.get("role") for m in completion if isinstance(m, Mapping)]
        assistant = [t for t, r in zip(texts, roles, strict=True) if r == "assistant"]
        return (assistant or texts or [""])[-1]
    return str(completion)


def _system_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        return "\n".join(
            str(m.get("content", "")) for m in prompt if isinstance(m, Mapping) and m.get("role") == "system"
        )
    return ""


def _record(name: str, arguments: dict[str, Any], harness: Harness) -> ToolCallRecord:
    if name == harness.output.skill_tool:
        skill = str(arguments.get("name", arguments.get("skill", "")))
        status: CallStatus = "ok" if harness.skill(skill) is not None else "unknown_skill"
        return ToolCallRecord(name, arguments, None, status, kind="skill")
    return ToolCallRecord(name, arguments, None, "not_run" if harness.tool(name) else "unknown_tool")


def trace_from_completion(completion: Any, episode: Episode, harness: Harness, prompt: Any = None) -> Trace:
    """A one-round trace of a single completion (see the module docstring)."""
    text = _completion_text(completion)
    parsed = parse_output(text, harness.output.reply_field)
    records = tuple(_record(c.name, dict(c.arguments), harness) for c in parsed.tool_calls)
    payload = parsed.reply or {}
    reply = strip_reasoning(str(payload.get(harness.output.reply_field, "")))
    statuses: dict[str, TraceStatus] = {"reply": "ok", "tool_calls": "incomplete"}
    status = statuses.get(parsed.kind, "invalid")
    loaded = tuple(str(r.arguments.get("name", "")) for r in records if r.kind == "skill" and r.status == "ok")
    return Trace(
        request_id=episode.episode_id,
        harness_name=harness.name,
        harness_hash="",
        model="completion",
        comments=episode.comments,
        system_prompt=_system_text(prompt),
        block_hashes={},
        tools_visible=tuple(t.name for t in harness.tools),
        skills_available=tuple(s.name for s in harness.skills),
        rounds=(Round(0, text, parsed.kind, reasoning=parsed.reasoning, tool_calls=records, reply=parsed.reply),),
        skills_loaded=loaded,
        reply=reply,
        reply_payload=dict(payload),
        status=status,
    )


def _column(kwargs: Mapping[str, Any], name: str, n: int, required: bool) -> list[Any]:
    values = kwargs.get(name)
    if values is None:
        if required:
            raise ValueError(
                f"reward functions need a {name!r} column (one entry per completion); got {sorted(kwargs)}"
            )
        return [None] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} entries for {n} completions")
    return values


def _samples(completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[Episode, Trace, Harness]]:
    n = len(completions)
    episodes = _column(kwargs, "episode", n, True)
    harnesses = _column(kwargs, "harness", n, True)
    traces = _column(kwargs, "trace", n, False)
    prompts = _column(kwargs, "prompts", n, False)
    out = []
    for completion, ep, tr, h, prompt in zip(completions, episodes, traces, harnesses, prompts, strict=True):
        episode, harness = _episode(ep), resolve_harness(h)
        if tr is None:
            trace = trace_from_completion(completion, episode, harness, prompt)
        else:
            trace = tr if isinstance(tr, Trace) else Trace.from_dict(dict(tr))
        out.append((episode, trace, harness))
    return out


def _from_judge(judge: Judge, name: str) -> RewardFunc:
    def reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [judge(e, t, h).score for e, t, h in _samples(completions, kwargs)]

    reward.__name__ = reward.__qualname__ = name  # TRL logs rewards under the function's name
    reward.__doc__ = f"TRL reward: the {name.removesuffix('_reward')} judge's score per completion."
    return reward


accuracy_reward = _from_judge(accuracy, "accuracy_reward")
effectiveness_reward = _from_judge(effectiveness, "effectiveness_reward")
tool_rationality_reward = _from_judge(tool_rationality, "tool_rationality_reward")
skill_selection_reward = _from_judge(skill_selection, "skill_selection_reward")


def make_cot_reward(tokenizer: Tokenizer | None = None) -> RewardFunc:
    """A ``−0.1·q(L)`` reward counting reasoning tokens with ``tokenizer`` (default: regex count)."""

    def cot_length_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [cot_reward(t, tokenizer) for _, t, _ in _samples(completions, kwargs)]

    return cot_length_reward


cot_length_reward = make_cot_reward()

REWARD_FUNCS: dict[str, RewardFunc] = {
    "accuracy": accuracy_reward,
    "effectiveness": effectiveness_reward,
    "tool_rationality": tool_rationality_reward,
    "skill_selection": skill_selection_reward,
    "cot_length": cot_length_reward,
}


def reward_funcs(names: Sequence[str] | None = None) -> list[RewardFunc]:
    """Reward functions by dimension name (default: all five, in :data:`REWARD_FUNCS` order)."""
    chosen = list(names) if names is not None else list(REWARD_FUNCS)
    unknown = [n for n in chosen if n not in REWARD_FUNCS]
    if unknown:
        raise KeyError(f"unknown reward dimension(s) {unknown}; known: {', '.join(REWARD_FUNCS)}")
    return [REWARD_FUNCS[n] for n in chosen]
