"""Pure dataset builders over the validated-trajectory table (no Dagster here)."""
