"""What the user showed, not just what they typed: forwarded bundles, images and files of a batch.

The worker fetches them through feishu/resources.py (cached per message, size-capped); the batch's text gets
the forwarded messages and file facts inline and an `<image ref="n"/>` marker where each image stood,
and the request gets the images themselves as labelled image blocks after the batch text. The session
log keeps the text with the markers, never the image data.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.inbound import Inbound
from feishu.resources import gather
from runs.runtime import Runtime

RICH_TYPES = frozenset({"merge_forward", "image", "file", "post"})  # posts may hold images
MAX_IMAGES_PER_TURN = 8


@dataclass
class BatchContent:
    bodies: list[str | None] = field(default_factory=list)  # escaped body per message; None = its text
    images: list[dict[str, Any]] = field(default_factory=list)  # label text block + image block, in order


def batch_content(rt: Runtime, batch: Sequence[Inbound]) -> BatchContent:
    out = BatchContent()
    for m in batch:
        if m.message_type not in RICH_TYPES or (m.message_type == "post" and "<image" not in m.text):
            out.bodies.append(None)
            continue
        parts: list[str] = []
        for block in gather(rt.feishu, rt.state, rt.keys, m):
            if block.get("type") == "image" and len(out.images) < 2 * MAX_IMAGES_PER_TURN:
                ref = len(out.images) // 2 + 1
                label = f'<image ref="{ref}" message_id="{html.escape(m.message_id)}"/>'
                out.images += [{"type": "text", "text": label}, block]
                parts.append(f'<image ref="{ref}"/>')
            elif block.get("type") == "image":
                parts.append("[image left out: too many images in one turn]")
            else:
                parts.append(str(block.get("text", "")))
        out.bodies.append("".join(parts))
    return out
