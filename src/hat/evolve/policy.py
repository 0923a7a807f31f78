"""``rule-reader``: the oracle that does only what the harness's skills tell it to.

Why it exists: the evolution loop must be testable on the simulator, and the ``oracle`` cannot
show a harness defect — it knows the gold and calls the right tools whatever the skills say. The
rule reader is the oracle with one privilege taken away: it calls a gold tool only when a rule of
one of the episode's skills (as the harness offers them now) names that tool. Delete the rule
"Call `handoff_to_service` …" from the after-sales skill and it stops handing over, exactly the
failure an operator's bad edit causes in production; restore the rule and it hands over again.

A request that no offered skill governs (casual chat, a masked skill) falls back to the oracle's
plan. Importing this module registers the policy in :data:`hat.env.policies.POLICIES`, so
``run_cases(..., "rule-reader")``, ``hat eval --model rule-reader`` and ``policy:rule-reader``
work wherever ``hat.evolve`` is imported (the ``hat`` CLI always is).
"""

from __future__ import annotations

import re

from hat.env.oracle import OracleModel
from hat.env.policies import POLICIES
from hat.harness.protocol import ToolCall
from hat.judge.skills import is_decoy

__all__ = ["RuleReaderPolicy", "names_tool"]


def names_tool(text: str, tool: str) -> bool:
    """Whether ``text`` names ``tool`` as a whole word (``get_price`` is not in ``get_prices``)."""
    return re.search(rf"(?<![\w\-.]){re.escape(tool)}(?![\w\-])", text) is not None


class RuleReaderPolicy(OracleModel):
    """The oracle, restricted to the tools its episode's skills name (module docstring)."""

    name = "rule-reader"

    def rules_text(self) -> str | None:
        """The bodies of the episode's skills the harness offers; None when it offers none."""
        wanted = set(self.episode.gold.skills)
        bodies = [s.body for s in self.view.skills if s.function_id in wanted and not is_decoy(s)]
        return "\n".join(bodies) if bodies else None

    def planned(self) -> list[tuple[str, ToolCall]]:
        rules = self.rules_text()
        plan = super().planned()
        return plan if rules is None else [(fid, call) for fid, call in plan if names_tool(rules, call.name)]


POLICIES.setdefault(RuleReaderPolicy.name, RuleReaderPolicy)
