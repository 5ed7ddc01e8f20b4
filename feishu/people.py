"""People's display names: the contact API (GET /open-apis/contact/v3/users/:user_id, user_id_type=open_id, through
lark-oapi's `contact.v3.user.get`), cached in Redis per open_id. The open_id stays the key everywhere; the name is
only what the model and the replies show.

Feishu's reference ("获取单个用户信息", open.feishu.cn/document/server-docs/contact-v3/user/get): any of
contact:contact.base:readonly, contact:contact:access_as_app, contact:contact:readonly or
contact:contact:readonly_as_app; the name itself needs the field grant contact:user.base:readonly (without it `name`
is absent); a user outside the app's contact range is refused (41050). Without the scope the `contact_names`
capability turns off (feishu/capabilities.py) and people show by open_id alone, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
from lark_oapi.api.contact.v3 import GetUserRequest

from core.errors import AdapterError, Retryable
from core.keys import Keys
from feishu.client import FeishuApi

log = logging.getLogger(__name__)
KNOWN_S = 86400  # a name is read again after a day (people rename themselves rarely)
UNKNOWN_S = 3600  # nobody to show (no scope, out of range): asked again after an hour
CAPABILITY = "contact_names"
MAX_LOOKUPS = 20  # contact calls per batch of names; the rest stay unnamed this time (cached ones always show)


def name_key(keys: Keys, open_id: str) -> str:
    return f"{keys.prefix}:people:name:{open_id}"


def names(api: FeishuApi, r: redis.Redis, keys: Keys, open_ids: Iterable[str]) -> dict[str, str]:
    """open_id → display name for those that have one (others are left out). One MGET, then one contact call per
    person not cached; a failure leaves that person unnamed (never fails the caller)."""
    wanted = [i for i in dict.fromkeys(open_ids) if i.startswith("ou_")]
    if not wanted:
        return {}
    cached = r.mget([name_key(keys, i) for i in wanted])
    out = {i: str(v) for i, v in zip(wanted, cached, strict=True) if v}
    missing = [i for i, v in zip(wanted, cached, strict=True) if v is None][:MAX_LOOKUPS]
    for open_id in missing:
        name = lookup(api, open_id)
        if name is None:
            continue
        r.set(name_key(keys, open_id), name, ex=KNOWN_S if name else UNKNOWN_S)
        if name:
            out[open_id] = name
    return out


def lookup(api: FeishuApi, open_id: str) -> str | None:
    """The person's name ("" when Feishu shows none or refuses); None on a transient failure (not cached)."""
    req = GetUserRequest.builder().user_id(open_id).user_id_type("open_id").build()
    try:
        resp = api._call(api.client.contact.v3.user.get, req, CAPABILITY)
    except Retryable:
        return None
    except AdapterError as exc:
        log.info("display name not readable", extra={"reason": open_id, "error": str(exc)[:200]})
        return ""
    user = getattr(resp.data, "user", None)
    return str(getattr(user, "name", "") or "")
