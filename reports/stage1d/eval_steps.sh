# Evaluation steps shared by the attempts' pipelines (sourced): `ev <model spec> <suite:n>...` runs
# reports/stage1b/eval.sh into "$A/eval" for each suite whose summary is not there yet (an
# interrupted suite resumes from its finished cases). Needs A, the attempt's folder.
done_eval() { [ -f "$A/eval/${1}_$(echo "$2" | sed 's#[^A-Za-z0-9._-]#_#g').json" ]; }  # suite, model spec
ev() {  # model spec, suites...
  local m="$1"; shift
  for s in "$@"; do done_eval "${s%%:*}" "$m" || EVAL_OUT="$A/eval" reports/stage1b/eval.sh "$m" "$s"; done
}
