"""Comparison tools: blind pairwise comparison of two systems and A/B analysis.

- :mod:`hat.compare.pairwise` — both systems answer the same simulated comments; blinded,
  order-randomised pairs; raters (the judges, an LLM, a person) and the Wilson-interval tally.
- :mod:`hat.compare.rate` — the offline rating page (FastAPI; imported on demand).
- :mod:`hat.compare.ab` — uplift with bootstrap intervals and CUPED, from logged visits or a
  simulated A/B on the simulator.
- :mod:`hat.compare.stats` — Wilson interval, seeded bootstrap, CUPED.

Submodules are imported where used, so ``import hat.compare`` stays cheap (no numpy, no FastAPI).
"""

__all__: list[str] = []
