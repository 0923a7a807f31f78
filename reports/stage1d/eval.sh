#!/usr/bin/env bash
# Evaluate one model for stage 1, attempt 4: the same suites, n and seeds as attempts 2 and 3
# (reports/stage1b/eval.sh), with the summaries in reports/stage1d/eval/.
# usage: reports/stage1d/eval.sh <model spec> [suite:n ...]   (repo root, .venv active)
EVAL_OUT=reports/stage1d/eval exec "$(dirname "$0")/../stage1b/eval.sh" "$@"
