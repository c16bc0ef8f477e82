"""Pure dataset builders (no Dagster here): a batch's validated trajectories
(``trajectories.py``), the exports over every batch (``registry.py`` names them,
``families.py`` builds them), and the stats, cards and report."""
