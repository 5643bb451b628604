"""The code location that workspace.yaml loads.

EVAL_PIPELINE_CAMPAIGNS names the campaigns to load (comma-separated built-in
names or YAML paths); it defaults to the built-in demo campaign.
"""

import os

from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.defs.location import build_definitions

CAMPAIGNS = [name.strip() for name in os.environ.get("EVAL_PIPELINE_CAMPAIGNS", "demo").split(",") if name.strip()]

defs = build_definitions([load_campaign(name) for name in CAMPAIGNS])
