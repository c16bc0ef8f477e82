"""Dagster definitions: thin assets over the pure modules (read, convert, validate, write)."""
