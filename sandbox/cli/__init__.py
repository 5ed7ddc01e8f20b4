"""`python -m sandbox …`: the commands a person types to talk to the sandboxed service."""
