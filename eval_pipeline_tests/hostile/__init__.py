"""Hostile agents' attacks that span packages and backends, each against the defence that closes it."""
