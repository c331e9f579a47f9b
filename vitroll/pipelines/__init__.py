"""Pipelines: from files to saved explanations (single images; folders and audits build on the same steps)."""
