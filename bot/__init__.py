"""Feishu edge: verify, decrypt, parse and admit events; adapters for Feishu and Claude."""
