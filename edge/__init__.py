"""The ingress edge. In: HTTP requests (webhook, admin API) and long-connection frames. Out: verified, parsed,
admitted events pushed onto route inboxes, and deliberate HTTP statuses. No Open API or model calls here.

`web` and `longconn` are the two transports; `ingress` is their shared core (`crypto` → `envelope` → `admission` →
routing → push); `side_events` handles clicks, record changes, recalls and edits; `commands` parses user commands;
`admin` serves `/admin/api/*`.
"""
