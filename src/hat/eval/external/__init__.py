"""External benchmarks run through HAT's own runtime: IFEval, RoTBench, BFCL.

They answer two of the report's questions: does harness-aware training keep general instruction
following (IFEval, scored with lm-eval's official checkers), and does tool use survive unfamiliar
tool lists and noisy names (RoTBench, BFCL)? Tool benchmarks share :mod:`.foreign`, which turns
each item's tool schemas into an in-memory harness and reads the model's first call(s) back,
mapped to the benchmark's names even when HSA renamed the tools.

The data is evaluation-only (see ``shared/data/README.md``): never train or tune prompts on it.
Importing this package is cheap; lm-eval and NLTK are imported when IFEval is scored.
"""

from hat.eval.external.bfcl import CATEGORIES as BFCL_CATEGORIES
from hat.eval.external.bfcl import check_bfcl, check_calls, load_bfcl, run_bfcl
from hat.eval.external.foreign import (
    FirstTurn,
    first_tool_calls,
    first_turn,
    harness_from_tools,
    normalise_schema,
    original_name,
    record_call,
)
from hat.eval.external.ifeval import (
    check_ifeval,
    ensure_sentence_splitter,
    generate_responses,
    load_ifeval,
    run_ifeval,
    score_ifeval,
    score_response,
)
from hat.eval.external.rotbench import LEVELS as ROTBENCH_LEVELS
from hat.eval.external.rotbench import check_rotbench, load_rotbench, run_rotbench, score_call

__all__ = [
    "BFCL_CATEGORIES",
    "ROTBENCH_LEVELS",
    "FirstTurn",
    "check_bfcl",
    "check_calls",
    "check_ifeval",
    "check_rotbench",
    "ensure_sentence_splitter",
    "first_tool_calls",
    "first_turn",
    "generate_responses",
    "harness_from_tools",
    "load_bfcl",
    "load_ifeval",
    "load_rotbench",
    "normalise_schema",
    "original_name",
    "record_call",
    "run_bfcl",
    "run_ifeval",
    "run_rotbench",
    "score_call",
    "score_ifeval",
    "score_response",
]
