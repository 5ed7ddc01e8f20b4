"""Linked documents' Redis keys: rendered content per revision, wiki nodes, file sizes, access lists."""

from __future__ import annotations

import hashlib

from core.keys import Keys


def doc_content(k: Keys, kind: str, token: str, revision: int, part: str = "") -> str:
    """STRING (JSON, expiring): a document's rendered text at one revision (sheets: per range)."""
    tail = f":{hashlib.sha1(part.encode()).hexdigest()[:12]}" if part else ""
    return f"{k.prefix}:doc:{kind}:{token}:r{revision}{tail}"


def wiki_node(k: Keys, token: str) -> str:
    """STRING (JSON, expiring): what a wiki node points at (obj_token, obj_type, title)."""
    return f"{k.prefix}:wiki_node:{token}"


def doc_file_size(k: Keys, token: str, modified: str) -> str:
    """STRING (expiring): a drive file's size in bytes at one modification time (a download asked it once)."""
    return f"{k.prefix}:doc_size:{token}:{modified}"


def doc_acl(k: Keys, kind: str, token: str) -> str:
    """STRING (JSON, expiring): who may view a document (link share, collaborators, owner), cached briefly."""
    return f"{k.prefix}:doc_acl:{kind}:{token}"
