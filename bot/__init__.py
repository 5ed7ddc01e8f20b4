"""The bot's Feishu-facing edge. In: HTTP requests (the event webhook, the admin API) and long-connection frames.
Out: verified, parsed, admitted events pushed onto route inboxes, and deliberate HTTP statuses. No Open API or model
calls here.

`web` and `longconn` are the two transports; `ingress` is their shared core (`crypto` → `envelope` → admission and
routing → one PUSH); `side_events` handles clicks, record changes, recalls and edits; `admin` serves `/admin/api/*`;
`doctor` is the contract's `python -m bot.doctor` (jobs/doctor.py).
"""

from core import boot

boot.importing()  # `python -m jobs.…` / `bot.…` starting: see core/boot.py
