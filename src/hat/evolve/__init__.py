"""Harness evolution: diagnose → propose → confirm (review page) → new version → regression gate,
with every version's lineage and a history plot.

Modules, in the order of the loop:

- :mod:`~hat.evolve.diagnose` — failed episodes → clusters ranked by impact, representative traces;
- :mod:`~hat.evolve.propose` — a cluster → validated harness edits with a rationale (rules, LLM,
  a person's edited folder);
- :mod:`~hat.evolve.review` — the review page (FastAPI, server-rendered, token-guarded);
- :mod:`~hat.evolve.lineage` — versions, parents, diffs, who proposed and approved, gate decisions;
- :mod:`~hat.evolve.gate` — paired evaluation of old vs new and the promote/block decision;
- :mod:`~hat.evolve.history` — metrics across versions as a plot.

:mod:`~hat.evolve.policy` adds the ``rule-reader`` simulator policy, which follows the skills' rules
and so feels a harness defect (the oracle does not). The web and plotting modules are imported
on use, so ``import hat.evolve`` needs neither FastAPI nor matplotlib.
"""

from hat.evolve.diagnose import Cluster, Diagnosis, diagnose, load_eval_report, load_traces
from hat.evolve.gate import GateResult, Target, evaluate_proposal, gate, paired_bootstrap
from hat.evolve.lineage import Lineage, Version, lineage_for
from hat.evolve.policy import RuleReaderPolicy
from hat.evolve.propose import Proposal, ProposalStore, edit_files, llm_proposal, propose, rule_proposals

__all__ = [
    "Cluster",
    "Diagnosis",
    "GateResult",
    "Lineage",
    "Proposal",
    "ProposalStore",
    "RuleReaderPolicy",
    "Target",
    "Version",
    "diagnose",
    "edit_files",
    "evaluate_proposal",
    "gate",
    "lineage_for",
    "llm_proposal",
    "load_eval_report",
    "load_traces",
    "paired_bootstrap",
    "propose",
    "rule_proposals",
]
