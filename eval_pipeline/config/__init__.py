"""The campaign file, validated at load (campaign_file.py), and the campaign it makes (campaign.py); release
gate policy files; a validation report's quarantine."""

from eval_pipeline.config.campaign import Campaign, CampaignError, VariantSeed, load_campaign, parse_campaign
from eval_pipeline.config.campaign_file import CampaignFile, Variant
from eval_pipeline.config.gates import GatePolicy, GatePolicyError, load_policy
from eval_pipeline.config.quarantine import ValidationFileError, read_quarantine

__all__ = [
    "Campaign",
    "CampaignError",
    "CampaignFile",
    "GatePolicy",
    "GatePolicyError",
    "ValidationFileError",
    "Variant",
    "VariantSeed",
    "load_campaign",
    "load_policy",
    "parse_campaign",
    "read_quarantine",
]
