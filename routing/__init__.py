"""Routing: the admin policy from env and the pure route-key function."""
