"""Reading a validation report (written by instance validation, trial/validation.py) for what a campaign leaves
out: the instances it quarantines, each with why."""

import json
from pathlib import Path
from typing import Any

__all__ = ["ValidationFileError", "read_quarantine", "read_validation"]


class ValidationFileError(ValueError):
    """A validation report that cannot be read; the message names the file."""


def read_quarantine(path: Path) -> dict[str, str]:
    """The instances a validation report quarantines (id -> why), for a campaign to leave out."""
    validation = read_validation(path)
    records = {record["instance_id"]: record for record in validation["instances"]}
    reasons = {}
    for instance_id in validation["quarantine"]:
        if instance_id in validation["excluded"]:
            reasons[instance_id] = validation["excluded"][instance_id]
        else:
            record = records.get(instance_id, {})
            reasons[instance_id] = f"{record.get('status', 'quarantined')} in {path}: {record.get('detail', '')}"[:500]
    return reasons


def read_validation(path: Path) -> dict[str, Any]:
    """A validation report as written by the `validation_report` asset."""
    try:
        validation = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValidationFileError(f"validation report {path}: {error}") from None
    if not isinstance(validation, dict) or not {"quarantine", "instances", "excluded"} <= set(validation):
        raise ValidationFileError(f"validation report {path}: expected quarantine, instances and excluded")
    return validation
