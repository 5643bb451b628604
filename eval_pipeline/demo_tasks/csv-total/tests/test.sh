#!/bin/bash
# Writes Harbor's reward.json: {"reward": 1} when total.txt holds the right sum.
# The expected total is the sum of environment/sales.csv as shipped, written here: the agent can edit the
# sales.csv in its working directory, so the verifier never reads it.
REWARD_JSON=$(dirname "${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}")/reward.json
expected=120.50
if [ "$(cat total.txt 2>/dev/null)" = "$expected" ]; then reward=1; else reward=0; fi
echo "{\"reward\": $reward}" > "$REWARD_JSON"
