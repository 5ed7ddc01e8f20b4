"""Code-platform webhooks into an item's topic (issue 33): GitHub and GitLab tell the topic what happened to the pull
requests, issues and CI runs its item watches.

In: `POST /hooks/github` and `POST /hooks/gitlab` (verified, stored in one PUSH, acknowledged); links to pull/merge
requests, issues and CI runs in the item's record, in its topic, or given to `/watch`.
Out: one short card per topic and minute for what a team must know at once (CI failed or recovered on the watched
head, merged, closed, changes requested); review and issue comments handed to quiet triage; the last CI state in
the record's optional column; the deliveries and each item's watches in the operator console; the doctor's rows.

`signature` checks the senders (pure); `links` reads links (pure); `events` reads payloads (pure); `ingress` is the
request path; `fanout` turns a stored delivery into events of the watching items' topics; `topic` buffers them and
posts the card; `watches` and `threads` keep what is watched and what is known of it; `feature` declares it all.
"""
