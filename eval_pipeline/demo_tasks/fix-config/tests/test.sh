#!/bin/bash
# Harbor's verifier contract: write 1 (pass) or 0 (fail) to the reward file.
# eval_pipeline names the file and the tests' folder in variables; Harbor's paths are the fallback.
REWARD_FILE=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}
TESTS_DIR=${EVAL_TESTS_DIR:-/tests}
# The verifier brings its own test tool, as Terminal-Bench's verifiers do: the task's image has none.
# -P: pytest (and pip) come from the environment, never from a module the agent left in the working directory.
python3 -P -m pytest --version >/dev/null 2>&1 || python3 -P -m pip install -q pytest >/dev/null 2>&1
if PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -P -m pytest -q -p no:cacheprovider "$TESTS_DIR/test_outputs.py"; then
  echo 1 > "$REWARD_FILE"
else
  echo 0 > "$REWARD_FILE"
fi
