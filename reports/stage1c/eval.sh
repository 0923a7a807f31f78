#!/usr/bin/env bash
# Evaluate one model for stage 1, attempt 3: the same suites, n and seeds as attempt 2
# (reports/stage1b/eval.sh), with the summaries in reports/stage1c/eval/.
# usage: reports/stage1c/eval.sh <model spec> [suite:n ...]   (repo root, .venv active)
EVAL_OUT=reports/stage1c/eval exec "$(dirname "$0")/../stage1b/eval.sh" "$@"
