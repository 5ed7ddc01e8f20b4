"""A tenant that granted only the scopes needed to reply (issue 14 B2): optional capabilities turn off loudly,
and every message is still answered — never a pause of all work, never a pause loop.

Through the real stack: web endpoint, worker and sweeper processes, lark-oapi against the emulator, which
answers 99991672 (naming the scopes) for every operation whose scopes the app lacks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests

from feishu.capabilities import CAPABILITIES
from sandbox.feishu.events import image_content, mention
from sandbox.feishu.rules import OPTIONAL_SCOPES
from tests.harness import BOT_OPEN_ID, deliver, message_id, model_requests_with, reply_text, unique, wait_route_idle

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture()
def narrow_tenant(feishu, r, keys) -> Iterator[None]:
    feishu.deny_scopes(OPTIONAL_SCOPES | {"im:message"})  # only im:message:send_as_bot is left
    yield
    feishu.deny_scopes(())
    r.delete(*[keys.capability_off(name) for name in CAPABILITIES], keys.alerts)


def test_a_tenant_without_optional_scopes_gets_every_message_answered(narrow_tenant, service, feishu, claude, r,
                                                                        keys) -> None:
    chat = unique("oc_p2p")
    answered = []
    for n in range(2):  # the second image would pause work again if the first had paused it (the old loop)
        mid = unique("om_img")
        feishu.add_message(mid, chat, msg_type="image", content=image_content(f"img_{n}"), chat_mode="p2p")
        feishu.add_resource(mid, f"img_{n}", PNG)
        env = deliver(service, feishu, chat_id=chat, chat_type="p2p", message_type="image",
                      content=image_content(f"img_{n}"), message_id=mid)
        answered.append(feishu.wait_for(lambda env=env: feishu.replies_to(message_id(env)), timeout=30))
    topic, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, topic, text="根消息", thread_id=thread)
    asked = deliver(service, feishu, chat_id=topic, chat_type="group", thread_id=thread, root_id=root,
                    parent_id=root, text="@_user_1 话题里的问题（范围测试）", mentions=[mention(BOT_OPEN_ID, "助手")])
    answered.append(feishu.wait_for(lambda: feishu.replies_to(message_id(asked)), timeout=30))
    wait_route_idle(r, keys, f"feishu:test:topic:{topic}:{thread}")
    assert all(len(a) == 1 for a in answered) and "话题里的问题" in reply_text(answered[-1][0])

    images = [json.dumps(q["body"]["messages"], ensure_ascii=False) for q in claude.requests
              if "img_0" in json.dumps(q["body"]["messages"], ensure_ascii=False)]
    assert images and "unavailable" in images[0] and "99991672" in images[0]  # the model is told
    assert model_requests_with(claude, "话题里的问题（范围测试）")
    ready = requests.get(f"{service.url}/readyz", timeout=10).json()
    assert ready["status"] == "degraded" and ready["paused"] == {}
    off = ready["capabilities_off"]
    assert {"resources", "reactions", "thread_history"} <= set(off)
    assert "im:message:readonly" in off["resources"]["scopes"]  # get-message-resource: im:resource is no help
    alerts = [json.loads(a)["text"] for a in r.lrange(keys.alerts, 0, -1)]
    assert len([a for a in alerts if "im:message.history:readonly" in a and "images" in a]) == 1  # one per capability
