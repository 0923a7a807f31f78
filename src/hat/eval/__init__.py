"""Evaluation: the report's suites (T1-T4), external benchmarks (``hat.eval.external``), reports and
latency replay. Subpackages import their heavy dependencies lazily, so importing this is cheap."""
