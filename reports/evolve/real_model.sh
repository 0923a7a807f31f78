#!/usr/bin/env bash
# Issue 16 with the default model: the reports/evolve.md cycle (defect -> T1 -> diagnose -> rule
# proposal -> approve through the review API -> gate), the blind pairwise test (HAT vs base, n = 100,
# the judges as raters), the simulated A/B, and a person's harmful edit that the gate must block -
# all on smollm2-hat (transformers) with hat eval's default decoding for this CPU (bf16 batch-invariant
# where the CPU has native bf16, else float32 batched, 16 in flight). In that order, most important
# first, because a 2-core box without bf16 runs 5-9 episodes a minute: ~1,300 episodes, ~3 h.
# Resumable: every step that wrote its output is skipped, an interrupted evaluation resumes.
#   bash reports/evolve/real_model.sh > /work/runs/evolve_real.log 2>&1 &
# Knobs: N (episodes per suite, 100), GATE_SUITES (t1,t3-prompt), GATE2_SUITES (t1),
# EVAL_PROPOSAL=1 (the proposal's paired preview for the review page; 2N more episodes), AB_COMMENTS (50).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=$REPO/.venv/bin:$PATH
W=${WORK:-/work/runs/evolve-real}
M=${MODEL:-smollm2-hat?engine=transformers}
N=${N:-100}
OUT=${OUT:-$REPO/reports/evolve/real}
mkdir -p "$W" "$OUT"
cd "$W"
stamp() { echo "== $(date -u +%H:%M:%S) $*"; }

if [[ ! -d shop ]]; then
  hat harness init shop --from livestream
  # the defect: an edit drops the after-sales rule that names the hand-off tool
  grep -v handoff_to_service shop/skills/after-sales-handoff/SKILL.md > x && mv x shop/skills/after-sales-handoff/SKILL.md
  hat evolve init shop
fi
stamp "T1 on the defective harness"
[[ -f runs/base/.done ]] || { hat eval --suite t1 --model "$M" --harness shop --n "$N" --seed 0 --out runs/base --resume && touch runs/base/.done; }
[[ -f diagnosis.json ]] || hat evolve diagnose --eval-report runs/base --out diagnosis.json | tee "$OUT/diagnose.txt"

# a person reads the clusters by impact and takes the first one an edit can fix (a cluster of the
# model's own mistakes, under rules the harness still has, gets no rule proposal)
evaluate=()
[[ ${EVAL_PROPOSAL:-0} = 1 ]] && evaluate=(--evaluate --model "$M" --suites t1 --n "$N" --seed 0)
if [[ ! -f proposals.json ]]; then
  stamp "propose"
  for c in $(python -c "import json; print(*[c['id'] for c in json.load(open('diagnosis.json'))['clusters']])"); do
    hat evolve propose --harness shop --diagnosis diagnosis.json --cluster "$c" --reference livestream \
      "${evaluate[@]}" --json > proposals.tmp || true
    if python -c "import json, sys; sys.exit(not json.load(open('proposals.tmp'))['proposals'])"; then
      mv proposals.tmp proposals.json; echo "cluster $c: proposal made"; break
    fi
    echo "cluster $c: no proposal ($(python -c "import json; print(json.load(open('proposals.tmp'))['notes'])"))"
  done
  [[ -f proposals.json ]] || { echo "no cluster got a proposal"; exit 1; }
fi
pid=$(python -c "import json; print(json.load(open('proposals.json'))['proposals'][0]['id'])")

approve() {  # proposal-id, note, output file: approve through the review page's API, as a person would
  [[ -f $3 ]] && return
  export HAT_REVIEW_TOKEN=${HAT_REVIEW_TOKEN:-$(python -c "import secrets; print(secrets.token_urlsafe(24))")}
  hat evolve review --harness shop --port 8791 > review.log 2>&1 &
  local server=$!
  for _ in $(seq 60); do curl -s -o /dev/null http://localhost:8791/ && break; sleep 1; done  # any HTTP answer
  curl -sf -X POST -H "Authorization: Bearer $HAT_REVIEW_TOKEN" -H 'Accept: application/json' \
    --data-urlencode 'reviewer=operator' --data-urlencode "note=$2" \
    "http://localhost:8791/proposals/$1/approve" > "$3.tmp" && mv "$3.tmp" "$3"
  kill "$server"; wait "$server" 2>/dev/null || true
}
gate_to() {  # output file, version, suites: exit 0 (promoted) and 1 (blocked) are both a decision
  [[ -f $1 ]] && return
  local rc=0
  hat evolve gate "$2" --harness shop --model "$M" --suites "$3" --n "$N" --seed 0 --json > "$1.tmp" || rc=$?
  if [[ $rc -gt 1 ]]; then echo "gate failed (exit $rc)"; exit 1; fi
  mv "$1.tmp" "$1"
}
record() {  # the lineage, its history plot and the step files, into the report folder
  hat evolve log --harness shop > "$OUT/log.txt"
  hat evolve history --harness shop --out "$OUT/history.png"
  for f in diagnosis.json proposals.json approved.json gate1.json proposals2.json approved2.json gate2.json; do
    [[ -f $f ]] && cp "$f" "$OUT/"
  done
  true
}
approve "$pid" "puts back the rule the last edit dropped" approved.json
version=$(python -c "import json; print(json.load(open('approved.json'))['version'])")
stamp "gate 1 ($version)"
gate_to gate1.json "$version" "${GATE_SUITES:-t1,t3-prompt}"
record

# blind pairwise, HAT vs base, the judges as raters
stamp "pairwise"
[[ -f pairwise/key.json ]] || { rm -rf pairwise; hat compare pairwise --model "$M" --baseline smollm2 --suite t1 --n "$N" --seed 5 --out pairwise --json > pairwise.json; }
hat compare tally pairwise --json > "$OUT/pairwise_tally.json"

# simulated A/B with a known true uplift
stamp "A/B"
[[ -f ab.json ]] || { hat compare ab-sim --control smollm2 --treatment "$M" --comments "${AB_COMMENTS:-50}" --seed 0 --out visits.jsonl --json > ab.json.tmp && mv ab.json.tmp ab.json; }
cp ab.json "$OUT/"

# a person's harmful edit: the shorter pricing skill drops its two tool rules
if [[ ! -f proposals2.json ]]; then
  rm -rf edited && cp -r shop edited
  python - <<'EOF'
import re, pathlib
p = pathlib.Path("edited/skills/pricing-discounts/SKILL.md")
p.write_text("\n".join(l for l in p.read_text().splitlines() if not re.search(r"get_price|get_discount_rules", l)) + "\n")
EOF
  hat evolve propose --harness shop --from-folder edited --rationale "shorter pricing skill" --json > proposals2.json
fi
pid2=$(python -c "import json; print(json.load(open('proposals2.json'))['proposals'][0]['id'])")
approve "$pid2" "looks harmless" approved2.json
version2=$(python -c "import json; print(json.load(open('approved2.json'))['version'])")
stamp "gate 2 ($version2)"
gate_to gate2.json "$version2" "${GATE2_SUITES:-t1}"
record

stamp "done"
