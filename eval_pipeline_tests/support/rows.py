"""SWE-bench rows made by hand and written as a dataset's files."""

import json


def row(**overrides):
    base = {
        "instance_id": "octo__lib-1",
        "repo": "octo/lib",
        "base_commit": "abc123",
        "problem_statement": "it breaks",
        "hints_text": "",
        "patch": "diff --git a/x.py b/x.py\n",
        "test_patch": "diff --git a/tests/test_x.py b/tests/test_x.py\n",
        "FAIL_TO_PASS": ["tests/test_x.py::test_new"],
        "PASS_TO_PASS": ["tests/test_x.py::test_old", "tests/test_y.py::TestY::test_z"],
        "version": "1.0",
        "environment_setup_commit": "abc123",
        "created_at": "2024-01-01T00:00:00Z",
    }
    return {**base, **overrides}


def swebench_rows(benchmark) -> list[dict]:
    """The demo's rows as SWE-bench publishes them: test lists as JSON strings, plus Verified's extra fields."""
    rows = []
    for instance in benchmark.instances:
        row = instance.to_row()
        row["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])
        row["PASS_TO_PASS"] = json.dumps(row["PASS_TO_PASS"])
        rows.append({**row, "difficulty": "<15 min fix"})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
