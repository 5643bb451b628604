#!/bin/bash
# Reward 1 when sorted.txt is environment/names.txt, as shipped, sorted and deduplicated.
# The expected lines are written here: the agent can edit the names.txt in its working directory.
REWARD_FILE=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}
if diff <(printf '%s\n' alice bob carol mallory trent) sorted.txt; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi
