"""The simulated live room, HAT's first domain plugin: a product catalog and generated worlds, viewer
comments with gold labels, the livestream tools' simulated backends with fault injection, the
oracle teacher and degenerate policies, and the livestream harness's context provider.

Nothing in the runtime core (:mod:`hat.harness`, :mod:`hat.models`) imports this package: the
livestream harness names its tools (``python:hat.env.livestream_tools:…``) and its context provider
(``python:hat.env.context:livestream_context``) in ``harness.yaml``, and the ``oracle`` /
``policy:<name>`` model specs are found through the ``hat.models`` entry points.
"""
