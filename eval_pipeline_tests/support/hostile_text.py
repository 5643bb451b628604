"""Text an agent could put in front of a reader's page: each must be shown, never run."""

SCRIPT = "<script>alert('pwned')</script>"
