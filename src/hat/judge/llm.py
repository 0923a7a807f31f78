"""An optional LLM judge of free-text reply quality, over any OpenAI-compatible endpoint.

The rule-based judges check facts, numbers, tools and form; they cannot tell a warm, natural,
spoken reply from a stilted one. :class:`LLMJudge` asks a strong model to grade that with a
fixed rubric (:data:`RUBRIC`, 1–5) and maps the grade to a score::

    score = (grade − 1) / 4          grade in [1, 5]; 0 when no grade can be read

It is not in :data:`hat.judge.JUDGES` (it costs a model call and is not deterministic across
endpoints); pass it to :func:`hat.judge.judge_trace` through ``judges=`` when wanted. Any
:class:`~hat.models.base.Model` works (tests use :class:`~hat.models.scripted.ScriptedModel`);
:meth:`LLMJudge.from_endpoint` builds an :class:`~hat.models.openai_backend.OpenAICompatibleModel`.
A backend failure raises :class:`~hat.errors.ModelError` (an outage should not look like a bad
reply); an unreadable answer scores 0 with ``details["parsed"] = False``.

Grades are read robustly (:func:`parse_grade`): ``<think>`` spans are dropped, then the first of
``{"score": 4}``, ``Score: 4`` / ``**Score:** 4.5``, ``4/5`` / ``4 out of 5``, a bare ``4``, or a
text whose only digits in 1–5 all agree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hat.env.episode import Episode
from hat.harness.protocol import strip_reasoning
from hat.harness.state import Harness
from hat.harness.trace import Trace
from hat.judge.base import JudgeResult, clamp
from hat.models.base import GenerationConfig, Message, Model

__all__ = ["RUBRIC", "LLMJudge", "parse_grade"]

RUBRIC = """\
You grade one reply of an AI avatar host in a live-shopping stream. The reply is spoken aloud \
to the viewer who commented. Judge only the reply's quality as free text:

5 - answers exactly what the viewer asked, warm and natural to say aloud, brief, every fact \
backed by the tool results or reference facts shown
4 - answers the question and is grounded, with a small flaw (a little stiff, long or vague)
3 - partly answers, or is correct but awkward, robotic or padded
2 - mostly misses the question, or states something the tool results do not support
1 - wrong, invented, rude, unsafe, or not a reply at all

Answer with exactly one line "Score: <1-5>" followed by one short sentence of reasons."""

_GRADE = r"([1-5](?:\.\d+)?)"
_PATTERNS = (
    re.compile(r'"score"\s*:\s*"?' + _GRADE, re.IGNORECASE),
    re.compile(r"\bscore\b\W{0,6}(?:is|of|=)?\s*\**\s*" + _GRADE + r"(?![\d.]*\d)", re.IGNORECASE),
    re.compile(r"(?<![\d.])" + _GRADE + r"\s*(?:/|out of)\s*5\b", re.IGNORECASE),
    re.compile(r"^\W*" + _GRADE + r"\W*$"),
)
_LONE_DIGIT = re.compile(r"(?<![\w.])([1-5])(?![\w.]|\.\d)")


def parse_grade(text: str) -> float | None:
    """The 1–5 grade in a judge model's answer, or ``None`` (see the module docstring)."""
    body = strip_reasoning(text or "").strip()
    for pattern in _PATTERNS:
        match = pattern.search(body)
        if match:
            grade = float(match.group(1))
            return grade if 1.0 <= grade <= 5.0 else None
    digits = set(_LONE_DIGIT.findall(body))
    return float(digits.pop()) if len(digits) == 1 else None


def _observations(trace: Trace, limit: int = 600) -> str:
    lines = []
    for call in trace.tool_calls:
        result = json.dumps(call.result, ensure_ascii=False, default=str)
        lines.append(
            f"- {call.name}({json.dumps(call.arguments, ensure_ascii=False)}) -> {call.status}: {result[:limit]}"
        )
    return "\n".join(lines) or "(no tool calls)"


class LLMJudge:
    """A judge ``(episode, trace, harness) -> JudgeResult`` backed by a chat model."""

    name = "llm_quality"

    def __init__(self, model: Model, *, rubric: str = RUBRIC, max_new_tokens: int = 96) -> None:
        self.model = model
        self.rubric = rubric
        self.config = GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0)

    @classmethod
    def from_endpoint(cls, base_url: str, model: str, **kwargs: Any) -> LLMJudge:
        """A judge over ``base_url``'s ``/v1/chat/completions`` (vLLM, SGLang, llama.cpp, hosted)."""
        from hat.models.openai_backend import OpenAICompatibleModel

        judge_kw = {k: kwargs.pop(k) for k in ("rubric", "max_new_tokens") if k in kwargs}
        return cls(OpenAICompatibleModel(base_url, model, **kwargs), **judge_kw)

    def messages(self, episode: Episode, trace: Trace, harness: Harness) -> list[Message]:
        history = "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in episode.history) or "(none)"
        facts = "; ".join(episode.gold.facts) or "(none)"
        user = (
            f"Dialogue so far:\n{history}\n\nViewer comment(s):\n"
            + "\n".join(trace.comments or episode.comments)
            + f"\n\nTool results the host saw:\n{_observations(trace)}\n\nReference facts: {facts}\n"
            + f"Length limit: {harness.limits.reply_max_chars} characters.\n\nThe host's reply:\n{trace.reply}"
        )
        return [{"role": "system", "content": self.rubric}, {"role": "user", "content": user}]

    def __call__(self, episode: Episode, trace: Trace, harness: Harness) -> JudgeResult:
        text = self.model.generate(self.messages(episode, trace, harness), self.config).text
        grade = parse_grade(text)
        if grade is None:
            return JudgeResult(
                0.0, f"no 1-5 grade in the judge's answer: {text[:120]!r}", {"parsed": False, "raw": text}
            )
        answer = strip_reasoning(text).strip().splitlines()
        reason = f"LLM grade {grade:g}/5" + (f": {answer[-1][:160]}" if answer else "")
        return JudgeResult(clamp((grade - 1.0) / 4.0), reason, {"parsed": True, "grade": grade, "raw": text})
