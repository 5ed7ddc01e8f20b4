"""Materials (issue 15): Open API calls per follow-up with record materials, and request tokens by document size.

The whole real stack (chaos.stack) with items on and a materials column, against the Feishu emulator (which
records every request with its `op`) and the Claude stand-in. Counts, not timings.

- an item topic whose record lists three documents: follow-up 1 (first read), follow-up 2 (all three unchanged:
  target 3 revision checks, 0 downloads), then one document edited and follow-up 3 (target 1 download);
- request tokens (the stand-in's count of the first model request) of the same p2p question about a 3-page
  document and about a 300-page one, and without any document (baseline); target ratio 300 : 3 ≤ 1.1.

    python -m bench.documents
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.items import Rig, Window
from chaos.stack import APP_ID, Stack
from sandbox.bitable.tables import TEXT, _field
from sandbox.claude.wire import input_tokens
from sandbox.feishu.events import message_event, signed_request

OUT = Path(__file__).resolve().parent / "results" / "documents.json"
APP, TABLE = "bascnBenchDocs01", "tblBenchDocs01"
DOC_OPS = ("doc_meta", "doc_blocks", "wiki_node", "sheet_meta", "sheet_values", "perm_public", "perm_members",
           "drive_metas")
PAGE_WORDS = 500  # a page of prose: ~500 words, ~700 tokens
PROSE = "the export job wrote rows before the cache flush and the retry queue drained slowly"


def pages(n: int, tag: str) -> str:
    words = PROSE.split()
    body = []
    for i in range(1, n + 1):
        text = " ".join(words[(i + j) % len(words)] for j in range(PAGE_WORDS))
        body.append(f"## {tag} page {i}\n{text}")
    return "\n\n".join(body)


def doc_ops(w: Window) -> dict[str, int]:
    return {op: w.ops[op] for op in DOC_OPS if w.ops[op]}


def p2p(rig: Rig, chat: str, text: str) -> str:
    env = message_event(chat_id=chat, chat_type="p2p", text=text, sender_open_id="ou_bench",
                        token=rig.stack.secrets.verification_token, app_id=APP_ID)
    m = env["event"]["message"]
    rig.stack.feishu.add_message(m["message_id"], chat, sender_open_id="ou_bench", content=m["content"])
    body, headers = signed_request(env, encrypt_key=rig.stack.secrets.encrypt_key)
    requests.post(f"{rig.stack.url}/feishu/events", data=body, headers=headers, timeout=10).raise_for_status()
    rig.answered(str(m["message_id"]))
    return str(m["message_id"])


def first_request_tokens(rig: Rig, chat: str, text: str) -> int:
    c0 = len(rig.stack.claude.requests)
    rig.measure(lambda: p2p(rig, chat, text))
    return input_tokens(rig.stack.claude.requests_since(c0)[0]["body"])


def materials(rig: Rig, tag: str) -> dict[str, Any]:
    feishu = rig.stack.feishu
    docs = [feishu.add_doc(f"材料 {k}", pages(2, f"m{k}")) for k in range(3)]
    chat, thread = f"oc_{tag}_m", f"omt_{tag}_m"
    root = rig.post(chat, "@_user_1 报表导出一直是空的，三个客户受影响。", "ou_reporter", thread=thread)
    item_id = rig.analysed(thread)
    item = rig.items.get(item_id)
    assert item is not None
    feishu.edit_record(APP, TABLE, item.record_id,
                       {"材料链接": "\n".join(f"https://feishu.cn/docx/{d}" for d in docs)})
    out: dict[str, Any] = {}
    for k, text in ((1, "@_user_1 根据材料看看原因"), (2, "@_user_1 还要核实什么")):
        w = rig.measure(lambda text=text: rig.answered(rig.post(chat, text, "ou_dev", thread=thread, root=root)))
        out[f"follow_up_{k}"] = doc_ops(w)
    feishu.edit_doc(docs[1], pages(2, "edited"))
    w = rig.measure(lambda: rig.answered(rig.post(chat, "@_user_1 材料有更新吗", "ou_dev", thread=thread, root=root)))
    out["follow_up_3_one_changed"] = doc_ops(w)
    return out


def tokens(rig: Rig, tag: str) -> dict[str, Any]:
    feishu = rig.stack.feishu
    short = feishu.add_doc("三页文档", pages(3, "short"), link_share="tenant_readable")
    long = feishu.add_doc("三百页文档", pages(300, "long"), link_share="tenant_readable")
    q = "帮我总结这份文档的要点"
    base = first_request_tokens(rig, f"oc_{tag}_t0", q)
    three = first_request_tokens(rig, f"oc_{tag}_t3", f"{q} https://feishu.cn/docx/{short}")
    many = first_request_tokens(rig, f"oc_{tag}_t300", f"{q} https://feishu.cn/docx/{long}")
    return {"no_document": base, "3_pages": three, "300_pages": many, "ratio_300_to_3": round(many / three, 3)}


def main(argv: list[str] | None = None) -> int:
    env = {"BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": TABLE}
    stack = Stack(workers=2, env=env)
    stack.feishu.add_table(APP, TABLE)
    stack.feishu.bitable.add_table(APP, TABLE).fields.append(_field("材料链接", TEXT, False))
    stack.start()
    try:
        rig, tag = Rig(stack), uuid.uuid4().hex[:6]
        rig.wait_idle()
        result = {"materials": materials(rig, tag), "tokens": tokens(rig, tag)}
    finally:
        stack.close()
    m, t = result["materials"], result["tokens"]
    checks = {
        "unchanged: 3 revision checks, 0 downloads": m["follow_up_2"].get("doc_meta") == 3
        and not m["follow_up_2"].get("doc_blocks"),
        "one changed: 1 download": m["follow_up_3_one_changed"].get("doc_blocks") == 1,
        "300 pages ≤ 1.1 × 3 pages": t["ratio_300_to_3"] <= 1.1,
    }
    result["checks"] = checks
    print(json.dumps(result, ensure_ascii=False, indent=2))
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
