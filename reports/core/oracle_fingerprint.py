"""Run the oracle over t1/t2/t3-tool/t3-prompt cases and hash, per case, what the model saw and did
(every chat message of the trace: system prompt, user message, tool observations, feedback), the
reply, the status and the judges' scores.

Issue 13 used it to show the neutral-core refactor changed nothing a model sees: run it on two
checkouts and compare the JSON files.

    PYTHONPATH=<checkout>/src python reports/core/oracle_fingerprint.py 100 > fingerprint.json
"""
import hashlib, json, sys
from hat.eval.suites import build_cases
from hat.env.policies import policy_model
from hat.env.sim import run_episode
from hat.harness import Agent
from hat.judge import judge_trace
out = {}
for suite in ("t1", "t2", "t3-tool", "t3-prompt"):
    for case in build_cases(suite, n=int(sys.argv[1]), seed=1):
        agent = Agent(case.harness, policy_model("oracle", case.episode, case.harness))
        trace = run_episode(agent, case.episode)
        agent.close()
        scores = {k: round(float(v.score), 6) for k, v in judge_trace(case.episode, trace, case.harness).items()}
        msgs = trace.to_messages()
        key = json.dumps([msgs, trace.reply, trace.status, scores], sort_keys=True, ensure_ascii=False, default=str)
        out[f"{suite}/{case.episode.episode_id}/{case.variant}"] = hashlib.sha256(key.encode()).hexdigest()[:16]
json.dump(out, sys.stdout, indent=0, sort_keys=True)
