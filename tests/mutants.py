"""`make mutants`: break each listed guard once, in a copy of the tree, and run the tests that claim it.

A guard whose mutation leaves its tests green is not guarded by them. Each mutant replaces one exact snippet
(the run fails loudly when the snippet is gone, so the list cannot rot silently) and names its tests. The copy
is made once; every mutant is applied, run and undone in it, so the working tree is never touched.

    python -m tests.mutants            # all, with a caught / missed table
    python -m tests.mutants A1 B6      # only these
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    path: str
    edits: tuple[tuple[str, str], ...]  # (exact snippet, its replacement), each snippet present exactly once
    tests: tuple[str, ...]


MV = "tests/test_model_view.py::"  # issue 34's tests on the request the product sends

MUTANTS: tuple[Mutant, ...] = (
    Mutant("A1", "a command's reply failure skips the attempt/failure/give-up path", "jobs/drain.py", (
        ("        outcome = self._guarded([raw], lambda c: answer_command(c, name), state)",
         "        from jobs.batches import parse_one\n"
         "        answer_command(self._call(parse_one(raw), batch_id_of([raw]), state, self.dropped), name)\n"
         "        self.commit(Commit(n=1, batch_id=batch_id_of([raw])))\n"
         "        outcome = None"),),
        ("tests/test_failures.py::test_a_command_whose_reply_keeps_failing_is_dead_lettered_and_the_route_goes_on",)),
    Mutant("A2", "a batch with a stored answer is split and re-asked", "jobs/giveup.py", (
        ("split = len(raw) > 1 and not self._answer_stored(batch_id)", "split = len(raw) > 1"),),
        ("tests/test_failures.py::test_giving_up_on_a_partly_posted_batch_never_asks_the_model_again",)),
    Mutant("A3", "the analysis decides its record without the item's guard and ignores a row linked meanwhile",
           "items/first_answer.py", (
               ("        with self.rt.items.guard(self.item.item_id, guard_ttl(self.rt)):\n"
                "            self.item = self.rt.items.get(self.item.item_id) or self.item\n", "        if True:\n"),
               ("            if self.rt.items.link_record(self.item.item_id, record_id) != 1:",
                "            if self.rt.items.link_record(self.item.item_id, record_id) == -1:")),
        ("tests/test_items_attack.py::test_an_analysis_racing_a_persons_new_row_gives_the_item_one_record",)),
    Mutant("A4", "read_thread ignores the user's reset", "turn/recall.py", (
        ("        self.reset_ms = reset_ms(rt, rk, sid)", "        self.reset_ms = None"),),
        ("tests/test_recall.py::test_read_thread_after_a_reset_leaves_out_what_was_said_before_it",)),
    Mutant("A9", "the watchdog charges a hash of the whole proc list", "jobs/watchdog.py", (
        ("    batch_id = rt.inbox.current_batch(rk) or ", "    batch_id = "),),
        ("tests/test_recovery.py::test_watchdog_charges_the_stuck_segment_not_the_whole_batch",)),
    Mutant("A10", "a summary covering a recalled message is still sent", "turn/rotation.py", (
        ("    if summary_ids and withdrawn.any_recalled(r, keys, rk, summary_ids):", "    if False:"),),
        ("tests/test_rotation.py::test_a_message_recalled_after_a_rotation_leaves_the_summary_too",)),
    Mutant("A11", "a batch too large for the budget is sent whole (its tail cut unseen)", "jobs/drain.py", (
        ("        n = batch_size(self.rt, self.rk, items[:seg.n])", "        n = seg.n"),),
        ("tests/test_rotation.py::test_a_batch_larger_than_the_budget_is_answered_over_several_turns_nothing_unseen",)),
    Mutant("A11b", "a lone oversize message is cut without a handle", "turn/request.py", (
        ("    if len(batch) != 1 or bodies[:1] != [None]:", "    if True:"),),
        ("tests/test_rotation.py::test_a_single_message_too_long_for_the_budget_is_spilled_with_a_handle",)),
    Mutant("A12", "read_thread's cursor moves to the next page past messages the request never carried",
           "turn/pages.py", (
               ("        elif shown < len(items):  # the next read", "        elif False:  # the next read"),),
        ("tests/test_recall.py::test_a_tool_result_fits_its_room_and_only_sent_messages_count_as_used",)),
    Mutant("A13", "the output reserve is taken out of the input budget", "claude/budget.py", (
        ("        return max(0, self.total - fixed)", "        return max(0, self.total - self.reserve - fixed)"),),
        ("tests/test_compress.py::test_the_budget_is_input_tokens_and_the_output_reserve_is_apart",
         "tests/test_rotation.py::test_a_topics_first_turn_keeps_its_bootstrap_with_a_large_output_reserve")),
    Mutant("A5", "anyone may `/item link` any record", "items/claim.py", (
        ("    if not may_link(rt, record, message.sender_id):", "    if False:"),),
        ("tests/test_items_attack.py::test_item_link_needs_the_records_owner_reporter_admin_or_a_member_of_its_chat",)),
    Mutant("A6", "an idle route's state and current log never expire", "runs/inbox_lua.py", (
        ("local keep = tonumber(ARGV[12])\nif keep > 0 then", "local keep = tonumber(ARGV[12])\nif false then"),),
        ("tests/test_inbox.py::test_an_idle_route_leaves_nothing_behind_after_its_retention",)),
    Mutant("A6b", "recall and edit notes grow without bound per chat", "bot/side_events.py", (
        ("if over > 0 then\n", "if false then\n"),),
        ("tests/test_withdrawn.py::test_notes_are_kept_only_where_the_bot_could_see_and_bounded_per_chat",)),
    Mutant("A7", "a click on a decided proposal never patches a card left pending", "items/approvals.py", (
        ("        if p.get(\"card_state\") != state:\n", "        if False:\n"),),
        ("tests/test_items_attack.py::test_an_approval_whose_card_patch_failed_is_shown_decided_on_the_rerun",)),
    Mutant("A8", "a replay after `failed` decides what is missing by count", "items/first_answer.py", (
        ("            if all(v.status != status for v in versions):",
         "            if len(versions) < (2 if status == SUMMARY else 3):"),),
        ("tests/test_items_attack.py::test_a_replayed_failed_analysis_writes_the_summary_and_the_full_answer",)),
    Mutant("A14", "an item's record and analysis read the raw text (the bot's own @ kept)",
           "items/first_answer.py", (
        ("        text = text_of(m, bot)", "        text = text_of(m)"),),
        ("tests/test_items_attack.py::test_records_and_analyses_show_mentions_as_names_without_the_bots_own",)),
    Mutant("B1", "a card's model text is not defused", "feishu/cards.py", (
        ("    card.markdown(defuse(clip(body))).divider()", "    card.markdown(clip(body)).divider()"),),
        ("tests/test_cards.py::test_model_text_in_a_card_cannot_mention_anyone_or_restyle_it",
         "tests/test_items_attack.py::test_a_first_answer_card_is_json_2_and_cannot_ping_the_group")),
    Mutant("B2", "a missing optional scope pauses all work", "feishu/client.py", (
        ("        if code == SCOPE_MISSING and capability:", "        if False:"),),
        ("tests/test_scopes.py::test_a_tenant_without_optional_scopes_gets_every_message_answered",)),
    Mutant("B5", "a refused record subscription leaves /readyz ready", "jobs/readiness.py", (
        ('(table.get("schema") != "ok" or table.get("subscription", "ok") != "ok")', '(table.get("schema") != "ok")'),),
        ("tests/test_items_attack.py::test_a_refused_record_subscription_is_named_in_readyz_and_items_still_work",)),
    Mutant("B3", "the outbox paces per second only (no per-minute window per API)", "runs/outbox.py", (
        ('[(f"minute:{api}", self.api_qpm, self.minute_ms), *chat,', "[*chat,"),),
        ("tests/test_pacing.py::test_the_per_minute_cap_of_each_message_api_is_paced_too",)),
    Mutant("B6", "tildes in post prose are sent as they are", "feishu/render.py", (
        ("markdown_to_post_ast(guard_tildes(text),", "markdown_to_post_ast((text),"),),
        ("tests/test_render.py::test_tildes_in_post_prose_cannot_pair_into_an_underline",
         "tests/test_progress.py::test_markdown_answer_is_posted_rendered_and_logged_as_markdown")),
    Mutant("B7", "topic links in the record open the chat (the topic only in the fragment), not the topic",
           "bitable/refs.py", (
        ('    return f"{applink_origin(origin)}/client/thread/open?{query}"',
         '    return f"{applink_origin(origin)}/client/chat/open?openChatId={chat_id}#thread_id={thread_id}"'),),
        ("tests/test_segments.py::test_topic_links_open_the_topic_and_still_name_it",
         "tests/test_items_attack.py::test_a_record_create_whose_answer_was_lost_makes_one_record")),
    Mutant("B4", "images of forwarded children are requested", "feishu/resources.py", (
        ("            if forwarded:\n", "            if False:\n"),),
        ("tests/test_materials.py::test_nested_bundles_recalled_messages_and_forwarded_images",)),
    Mutant("C1", "the content dedupe key forgets the message's create_time", "core/inbound.py", (
        ('self.chat_id, self.create_time or "", ', "self.chat_id, "),),
        ("tests/test_failures.py::test_the_same_words_sent_twice_are_two_messages_both_answered",)),
    Mutant("C2", "the lease-lost fence before side effects is off", "jobs/drain.py", (
        ("        if lease != self.exec_id:\n", "        if False:\n"),),
        ("tests/test_failures.py::test_a_run_that_lost_its_lease_posts_nothing",)),
    Mutant("C3", "a record create uses a random client_token and skips the search by item id",
           "items/first_answer.py", (
               ('        found = bt.search(schema.name("item_id"), item.item_id)', "        found = []"),
               ('client_token_for(f"item-record:{item.item_id}")', "client_token_for(str(time.time()))")),
        ("tests/test_items_attack.py::test_a_record_create_whose_answer_was_lost_makes_one_record",)),
    Mutant("C4", "a pacing slot is scored at its grant, not at Feishu's answer", "feishu/pacing.py", (
        ("redis.call('ZADD', KEYS[1], now, ARGV[1])\nredis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))\n", ""),
        ("redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])", "redis.call('ZADD', KEYS[1], now, ARGV[3])")),
        ("tests/test_pacing.py::test_a_slow_and_jittery_feishu_still_sees_at_most_five_a_second_in_a_chat",)),
    Mutant("C5", "a kept rejected event keeps its top-level token", "bot/ingress.py", (
        ('        kept = {k: v for k, v in payload.items() if k != "token"}', "        kept = dict(payload)"),),
        ("tests/test_ingress_http.py::test_signed_but_malformed_event_is_400_and_kept_without_its_token",)),
    Mutant("C6", "ACQUIRE grants the lease to anyone", "runs/inbox_lua.py", (
        ("if (not v) or string.sub(v, 1, 2) == 'k:' or v == ('d:' .. ARGV[1]) then", "if true then"),),
        ("tests/test_protocol.py::test_protocol_never_strands_an_event",)),
    Mutant("C8", "a job killed between its start and taking the route waits out the kick lease", "runs/inbox_lua.py", (
        ("  if status == 'started' and not (started and started ~= '' and started < ARGV[11]) then",
         "  if status == 'started' then"),),
        ("tests/test_inbox.py::test_a_job_killed_after_it_started_and_before_it_took_the_route_is_redone_soon",)),
    Mutant("C7", "only the reporter may decide an approval", "items/approvals.py", (
        ('                                record.users(schema.name("owner")) + record.users(schema.name("reporter")))',
         '                                record.users(schema.name("reporter")))'),
        ("    if authority.may_decide(who, rt.settings.item_admins, ()):\n        return True\n", "")),
        ("tests/test_items_attack.py::test_the_records_owner_and_an_item_admin_may_approve",)),
    # Issue 15: materials
    Mutant("D1", "a document is used whatever the asker may view", "documents/selection.py", (
        ("        return all(may_view(acl, s, self.env.member_of) for s in self.senders)", "        return True"),),
        ("tests/test_documents.py::test_a_document_the_asker_may_not_view_stays_out_of_their_request",
         "tests/test_documents.py::test_read_document_refuses_what_the_asker_may_not_view")),
    Mutant("D2", "a chat collaborator counts without the sender being in the chat", "documents/access.py", (
        ("    return any(member_of(chat, sender) for chat in acl.chats)", "    return bool(acl.chats)"),),
        ("tests/test_documents.py::test_a_chat_collaborator_counts_for_its_members",)),
    Mutant("D3", "an item's record materials are checked like any link (closed ones refused)",
           "documents/selection.py", (
        ("        if use.link in self.record_keys:\n            return True\n", ""),),
        ("tests/test_documents_items.py",)),
    Mutant("D4", "an unchanged document is downloaded again", "documents/reader.py", (
        ('        hit = self._cached("docx", token, revision)', "        hit = None"),),
        ("tests/test_documents.py::test_an_edit_between_turns_is_said_and_unchanged_documents_are_not_downloaded",)),
    Mutant("D5", "an edit since the last use is not said", "documents/selection.py", (
        ("        if earlier is not None and earlier != doc.revision:", "        if False:"),),
        ("tests/test_documents.py::test_an_edit_between_turns_is_said_and_unchanged_documents_are_not_downloaded",)),
    Mutant("D6", "the next turn starts a long document over, not at the ledger's cursor", "documents/selection.py", (
        ('            use.cursor = int(last["cursor"])', "            use.cursor = 0"),),
        ("tests/test_documents.py::test_a_300_page_document_stays_in_budget_and_resumes_at_the_cursor",)),
    Mutant("D7", "the ledger records more than the requests carried", "documents/selection.py", (
        ("                use.included.append([a, b])", "                use.included.append([a, b + 1])"),),
        ("tests/test_documents.py::test_a_300_page_document_stays_in_budget_and_resumes_at_the_cursor",)),
    Mutant("D8", "a wiki node is looked up every time", "documents/reader.py", (
        ("        cached = self.r.get(key)\n        if cached:\n            return dict(json.loads(cached))",
         "        cached = None\n        if cached:\n            return dict(json.loads(cached))"),),
        ("tests/test_documents.py::test_a_wiki_link_resolves_to_the_same_document_with_one_node_lookup",)),
    Mutant("D9", "a material taken out of the record stays carried", "documents/selection.py", (
        ('            if ref and p.get("source") != "record" and _carry(p):', "            if ref and _carry(p):"),),
        ("tests/test_documents_items.py",)),
    Mutant("D10", "a document not shared with the app gets no how-to", "documents/selection.py", (
        ('"no_access": "doc_not_shared", ', ""),),
        ("tests/test_documents.py::test_a_document_not_shared_with_the_app_gets_a_how_to_and_no_pause",)),
    Mutant("D11", "document text may close our elements", "documents/selection.py", (
        ('    return _TAGLIKE.sub("&lt;", text)', "    return text"),),
        ("tests/test_documents_rules.py::test_document_text_can_never_close_or_open_our_elements",)),
    Mutant("E1", "the sweeper's recovery pass is skipped (takeover waits for the full sweep)", "jobs/sweeper.py", (
        ("            recover(self.rt)\n", "            pass\n"),),
        ("tests/test_fast_recovery.py",)),
    Mutant("E2", "a rerun ignores the card its killed run made (a second card)", "turn/stream.py", (
        ("        self.card_id, self.message_id = found.get(CARD), found.get(MESSAGE)",
         "        self.card_id, self.message_id = None, None"),),
        ("tests/test_streaming.py::test_a_worker_killed_mid_stream_leaves_one_card_the_rerun_finishes",)),
    Mutant("E3", "the plain fallback after a card reuses the card's uuid", "turn/stream.py", (
        ('        return f"{self.batch_id}:plain" if self.card_id else None', "        return None"),),
        ("tests/test_streaming.py::test_a_card_that_cannot_be_finished_is_followed_by_the_complete_answer",)),
    Mutant("E4", "streamed text is shown without defusing tags", "turn/stream.py", (
        ("        return card_markdown(before_table(dedent_fences(head), MARKDOWN_TABLES_MAX), self.people)",
         "        return before_table(dedent_fences(head), MARKDOWN_TABLES_MAX)"),),
        ("tests/test_streaming.py::test_streamed_text_cannot_ping_anyone",)),
    Mutant("E5", "updates are not paced by STREAM_UPDATE_SECONDS", "turn/stream.py", (
        ("        if self.message_id and now < self.next_at:", "        if False:"),),
        ("tests/test_streaming.py::test_a_long_answer_grows_in_one_card_and_ends_as_the_complete_answer",)),
    Mutant("E6", "a resent COMMIT trims again", "runs/inbox_lua.py", (
        ("if done and string.sub(done, 1, #token + 1) == token .. ':' then", "if false then"),),
        ("tests/test_protocol.py::test_a_resent_commit_consumes_its_events_once",)),
    Mutant("E8", "one refused update stops the card's updates", "turn/stream.py", (
        ("            if not self.message_id:\n                self._stop(exc)\n", "            self._stop(exc)\n"),),
        ("tests/test_streaming.py::test_one_failed_update_does_not_stop_the_card",)),
    Mutant("E9", "the elastic pool never grows", "jobs/pool.py", (
        ("    room = max(0, maximum - sum(alive.values()))", "    room = 0"),),
        ("tests/test_elastic.py::test_a_burst_of_routes_runs_at_once_and_the_pool_shrinks_back",)),
    Mutant("E10", "pushes are acknowledged before a replica has them", "state/groupcommit.py", (
        ("        waited = self.replicas.wanted()", "        waited = False"),),
        ("tests/test_sentinel.py::test_failover_mid_load_loses_nothing_and_answers_once",)),
    Mutant("E11", "a chaining horse passes jobs waiting in its RQ queue", "jobs/drain.py", (
        ("        if origin and rt.rq.llen(waiting_jobs):", "        if False:"),),
        ("tests/test_dispatch.py::test_a_horse_stops_chaining_while_jobs_wait_in_its_rq_queue",)),
    Mutant("E12", "a card made but never posted is not posted at the end", "turn/stream.py", (
        ("            if not self.message_id:  # created, but its run died (or failed) before posting it\n"
         "                self._post()\n", ""),),
        ("tests/test_streaming.py::test_a_card_made_but_not_posted_is_posted_when_the_answer_is_done",)),
    Mutant("F1", "a due timer is pushed without its (timer id, due) dedupe key", "timers/scheduler.py", (
        ("message_id=key, content_key=key, queue=rt.queue_of(t.route_key))",
         "message_id=key + repr(time.time()), content_key=key + repr(time.time()), queue=rt.queue_of(t.route_key))"),),
        ("tests/test_timers.py::test_two_schedulers_racing_push_each_due_timer_exactly_once",
         "tests/test_timers.py::test_a_crash_between_the_push_and_the_end_pushes_no_second_event")),
    Mutant("F2", "/reset leaves the route's follow-ups pending", "timers/feature.py", (
        ("    return commands.on_reset(c.rt, c.rk, c.message, c.batch_id)", "    return Said('')"),),
        ("tests/test_followups.py::test_reset_cancels_the_routes_pending_followups_and_says_how_many",)),
    Mutant("F3", "a recalled request keeps its follow-up", "bot/side_events.py", (
        ("        cancelled = self._cancel_followups(message_id)", "        cancelled: list[str] = []"),),
        ("tests/test_followups.py::test_a_recalled_request_cancels_the_followup_it_set",)),
    Mutant("F4", "a follow-up posts even when the check found it no longer needed", "timers/followup.py", (
        ("    if not check.post:", "    if False:"),),
        ("tests/test_followups.py::test_after_the_owner_replied_the_followup_posts_nothing_and_logs_why",)),
    Mutant("F5", "a follow-up of a closed item still reminds", "timers/followup.py", (
        ('        void = "the item is closed"', '        void = ""'),),
        ("tests/test_followups.py::test_a_closed_item_needs_no_reminder_and_costs_no_model_call",)),
    Mutant("F6", "anyone may cancel a follow-up", "timers/authority.py", (
        ("    return who == creator or who in admins or who in item_people", "    return True"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",
         "tests/test_followups.py::test_cancel_is_for_the_creator_the_items_owner_or_reporter_and_admins")),
    Mutant("F7", "the digest lists closed items", "timers/digest.py", (
        ("if _in_chat(r, chat, chat_id) and r.text(status).strip() not in closed_set]",
         "if _in_chat(r, chat, chat_id)]"),
        ('    also: list[Match] = [(status, "isNot", [s]) for s in sorted(closed)[:MAX_CONDITIONS - 1]]',
         "    also: list[Match] = []")),
        ("tests/test_always_on.py::test_the_digest_lists_exactly_the_chats_open_items_once_per_day_across_restarts",)),
    Mutant("F8", "a digest timer per process instead of per chat and slot", "timers/model.py", (
        ('    return f"dg_{chat_id}_{slot}"', '    import os\n    return f"dg_{chat_id}_{slot}_{os.getpid()}"'),),
        ("tests/test_always_on.py::test_the_digest_lists_exactly_the_chats_open_items_once_per_day_across_restarts",)),
    Mutant("F9", "triage posts again within the post period", "triage/run.py", (
        ("    if posted_by != firing and ago < triage_settings(rt.settings).triage_post_period_seconds:",
         "    if False:"),),
        ("tests/test_always_on.py::test_a_topic_gets_at_most_one_unasked_post_per_period_and_only_where_opted_in",)),
    Mutant("F10", "a triage call per message instead of per topic and quiet period", "triage/buffer.py", (
        ("    period = int(now // quiet)", "    period = int(now * 1e6)"),),
        ("tests/test_always_on.py::test_a_topic_gets_at_most_one_unasked_post_per_period_and_only_where_opted_in",)),
    Mutant("F11", "the web keeps and schedules triage for chats that did not opt in", "triage/buffer.py", (
        ('    if m.chat_type == "p2p" or not m.thread_id or m.chat_id not in triage_settings(settings).triage_chats:',
         '    if m.chat_type == "p2p" or not m.thread_id:'),),
        ("tests/test_always_on.py::test_a_topic_gets_at_most_one_unasked_post_per_period_and_only_where_opted_in",)),
    Mutant("F13", "a follow-up's reminder keyed by the batch: a replay after an applied-but-refused post repeats it",
           "timers/followup.py", (
               ("        return reply(t.source_message_id, run_key(t), topic)",
                "        import uuid\n        return reply(t.source_message_id, uuid.uuid4().hex, topic)"),),
        ("tests/test_followups.py::test_a_reminder_feishu_applied_but_refused_is_not_repeated_by_the_replay",)),
    Mutant("F14", "triage's post period taken by no firing in particular: a replayed firing is capped by itself",
           "triage/run.py", (
        ('    rt.state.hset(state_key, mapping={"posted_at": repr(rt.clock.now()), "posted_by": firing})',
         '    rt.state.hset(state_key, mapping={"posted_at": repr(rt.clock.now()), "posted_by": rk + "-"})'),),
        ("tests/test_always_on.py::test_a_dead_lettered_triage_note_is_posted_once_by_its_replay",)),
    Mutant("F12", "the fast path lets greetings and acknowledgements through", "triage/buffer.py", (
        ("    if not worth_triage(m.text):", "    if False:"),),
        ("tests/test_always_on.py::test_a_topic_gets_at_most_one_unasked_post_per_period_and_only_where_opted_in",)),
    # -- issue 23: several people, long horizons (timers, follow-ups, digests, the worker supervisor): G* ------
    Mutant("G1", "a follow-up is credited to the batch's last sender, not the message asking", "timers/tool.py", (
        ('    m = ctx.asking(str(args.get("message_id") or "").strip())', "    m = ctx.batch[-1]"),),
        ("tests/test_seams.py::test_a_reminder_asked_in_a_shared_batch_is_the_askers",
         "tests/test_timers.py::test_the_follow_up_is_the_asking_messages_sender_s_and_names_a_message_of_the_batch")),
    Mutant("G2", "the stand-in acts on the batch's last message only", "sandbox/claude/followups.py", (
        ("for n, (_sender, mid, words) in enumerate(_MESSAGE.findall(text)):",
         "for n, (_sender, mid, words) in enumerate(_MESSAGE.findall(text)[-1:]):"),),
        ("tests/test_seams.py::test_a_reminder_asked_in_a_shared_batch_is_the_askers",)),
    Mutant("G3", "/reset in a shared topic cancels everyone's follow-ups", "timers/authority.py", (
        ("        (cancel if may_cancel(t.created_by, who, admins, people) else keep).append(t)",
         "        cancel.append(t)"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",
         "tests/test_seams.py::test_reset_in_a_shared_topic_cancels_only_what_the_resetter_may_and_tells_the_creators")),
    Mutant("G4", "creators are not told when someone else's reset cancels theirs", "timers/authority.py", (
        ("        if t.created_by and t.created_by != who:", "        if False:"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",
         "tests/test_seams.py::test_reset_in_a_shared_topic_cancels_only_what_the_resetter_may_and_tells_the_creators")),
    Mutant("G5", "creators are not told when someone else cancels their follow-up", "timers/commands.py", (
        ("    if t.created_by and t.created_by != message.sender_id:", "    if False:"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",
         "tests/test_followups.py::test_cancel_is_for_the_creator_the_items_owner_or_reporter_and_admins")),
    Mutant("G6", "a firing reads the route's (expired) generation and drops the follow-up", "timers/followup.py", (
        ("    if t.source_message_id and withdrawn.any_recalled(",
         "    if t.gen != state.generation:\n        return 'reset'\n"
         "    if t.source_message_id and withdrawn.any_recalled("),),
        ("tests/test_seams.py::test_a_followup_months_ahead_fires_after_the_routes_state_expired",)),
    Mutant("G7", "one person may fill a shared conversation's follow-ups", "timers/store.py", (
        ("  if mine >= tonumber(ARGV[6]) then return -3 end", "  if false then return -3 end"),),
        ("tests/test_timers.py::test_caps_per_person_across_routes_per_person_on_a_route_and_in_all",
         "tests/test_seams.py::test_one_person_cannot_fill_a_shared_topic_or_hold_reminders_everywhere")),
    Mutant("G8", "no cap on one person's follow-ups across routes", "timers/store.py", (
        ("redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[5]) then return -2 end",
         "redis.call('ZCARD', KEYS[5]) < 0 then return -2 end"),),
        ("tests/test_timers.py::test_caps_per_person_across_routes_per_person_on_a_route_and_in_all",
         "tests/test_seams.py::test_one_person_cannot_fill_a_shared_topic_or_hold_reminders_everywhere")),
    Mutant("G9", "an ended follow-up keeps its place in its creator's cap", "timers/store.py", (
        ("local by = redis.call('HGET', KEYS[1], 'created_by')\n"
         "if by and by ~= '' then redis.call('ZREM', KEYS[4] .. by, ARGV[1]) end\n", ""),),
        ("tests/test_timers.py::test_caps_per_person_across_routes_per_person_on_a_route_and_in_all",)),
    Mutant("G10", "no bound on the deployment's pending timers", "timers/store.py", (
        ("redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[7]) then return -4 end",
         "redis.call('ZCARD', KEYS[2]) < 0 then return -4 end"),),
        ("tests/test_timers.py::test_caps_per_person_across_routes_per_person_on_a_route_and_in_all",)),
    Mutant("G11", "RQ workers outlive their killed supervisor", "jobs/worker.py", (
        ("    if parent:\n        die_with(parent)\n", ""),),
        ("tests/test_seams.py::test_killing_the_worker_supervisor_takes_its_workers_with_it",)),
    Mutant("G12", "one digest per chat and day whatever the cron says", "timers/scheduler.py", (
        ('digest_id(chat_id, slot.strftime("%Y-%m-%dT%H%M"))', 'digest_id(chat_id, slot.strftime("%Y-%m-%d"))'),),
        ("tests/test_always_on.py::test_each_cron_slot_of_a_day_gets_its_digest_even_after_an_empty_one",)),
    Mutant("G13", "a turn a reset overtook leaves its follow-ups standing", "timers/feature.py", (
        ("    superseded=lambda t: tool.void_turn(t.rt, t.rk, t.batch_id), reset=_reset,", "    reset=_reset,"),),
        ("tests/test_seams.py::test_a_reset_that_overtakes_a_turn_leaves_none_of_its_followups",)),
    Mutant("G14", "the tool sets a follow-up after a reset moved the route on", "timers/tool.py", (
        ("    added = timers_of(rt).add(t, caps=caps(rt), now=now, fence_gen=True)",
         "    added = timers_of(rt).add(t, caps=caps(rt), now=now, fence_gen=False)"),),
        ("tests/test_seams.py::test_a_reset_that_overtakes_a_turn_leaves_none_of_its_followups",)),
    Mutant("G15", "a follow-up time without an offset is taken in the server's zone", "timers/instant.py", (
        ("    if at.tzinfo is None or at.utcoffset() is None:", "    if False:"),),
        ("tests/test_timers.py::test_instants_naive_past_and_too_far_are_refused_and_others_stated_in_the_bots_zone",)),
    Mutant("G16", "the model is not told the current time and zone", "timers/feature.py", (
        ('        return now_line(now) + "\\n"  # the model resolves "3点" against it', '        return ""'),),
        ("tests/test_followups.py::test_a_followup_set_on_monday_fires_once_on_wednesday_in_its_topic_after_restarts",)),
    Mutant("G17", "a reminder whose topic or chat is gone is dead-lettered", "timers/followup.py", (
        ("        gone = GONE.get(str(exc.code))", "        gone = None"),),
        ("tests/test_seams.py::test_a_followup_in_a_topic_whose_place_is_gone_posts_where_it_can_or_says_why",)),
    Mutant("G18", "a reminder whose request is gone is dead-lettered", "timers/followup.py", (
        ("        if code not in REQUEST_GONE:", "        if True:"),),
        ("tests/test_seams.py::test_a_followup_in_a_topic_whose_place_is_gone_posts_where_it_can_or_says_why",
         "tests/test_seams.py::test_a_followup_in_a_private_chat_whose_request_is_gone_posts_into_the_chat")),
    Mutant("G19", "a chat without thread replies dead-letters the reminder", "timers/followup.py", (
        ("        if code == NO_THREAD_REPLIES:", "        if False:"),),
        ("tests/test_seams.py::test_a_followup_in_a_topic_whose_place_is_gone_posts_where_it_can_or_says_why",)),
    Mutant("G20", "anyone may approve a record change", "items/authority.py", (
        ("    return bool(who) and (who in admins or who in record_people)", "    return bool(who)"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",
         "tests/test_items_attack.py::test_the_records_owner_and_an_item_admin_may_approve")),
    Mutant("G21", "anyone may link a record to a topic", "items/authority.py", (
        ("    return bool(who) and any(member_of(chat_id, who) for chat_id in record_chats)", "    return bool(who)"),),
        ("tests/test_authority_machine.py::TestSeams::runTest",)),
    Mutant("G22", "a follow-up in a topic the app may not read fails for good", "timers/followup.py", (
        ("            except CapabilityOff:  # the app may not read the topic (a scope missing): remind without it\n"
         "                return [UNREAD]\n",
         "            except ZeroDivisionError:\n                return [UNREAD]\n"),),
        ("tests/test_seams.py::test_a_followup_in_a_topic_the_app_may_not_read_still_reminds",)),
    # (end of G)

    # -- issue 23: documents, permissions, doctor rows, error codes: H* ----------------------------------------
    Mutant("H1", "one permission fact that could not be read refuses everyone (the old all-or-nothing check)",
           "documents/access.py", (
               ("    if not sender:\n        return False",
                "    if not sender or acl.missing:\n        return False"),),
        ("tests/test_documents_grants.py::test_each_scope_missing_alone_withholds_only_what_it_proves",)),
    Mutant("H2", "a partly read permission answer is cached", "documents/access.py", (
        ("if ttl_s > 0 and acl.complete:", "if ttl_s > 0:"),),
        ("tests/test_documents_grants.py::test_a_fact_that_could_not_be_read_is_asked_again_once_the_scope_is_granted",)),
    Mutant("H3", "the doctor counts users' grants as the app's", "jobs/doctor.py", (
        (' and (s.get("scope_type") or "tenant") == "tenant"}', "}"),),
        ("tests/test_doctor.py::test_scope_rows_follow_the_documented_lists",
         "tests/test_doctor.py::test_triage_needs_the_group_message_scope_and_digests_need_items")),
    Mutant("H4", "a row needing two grants is present with one", "jobs/doctor.py", (
        ("also = not need.also or any(n in granted for n in need.also)", "also = True"),),
        ("tests/test_doctor.py::test_scope_rows_follow_the_documented_lists",)),
    Mutant("H5", "metas' failed_list is ignored", "feishu/docs.py", (
        ('raise unavailable(code, f"drive metas', 'return {} or unavailable(code, f"drive metas'),),
        ("tests/test_documents_grants.py::test_a_file_the_app_cannot_see_is_said_to_be_not_shared_with_the_app",)),
    Mutant("H6", "NOTEXIST and an edit error read as no access", "feishu/docs.py", (
        ("NO_ACCESS = {1770032, 131006, 1310213, 1063002, 91403, 970003}",
         "NO_ACCESS = {1770032, 131006, 1310213, 1063002, 91403, 970003, 91402, 1770029}"),),
        ("tests/test_documents_rules.py::test_feishu_error_codes_map_to_what_the_person_is_told",)),
    Mutant("H7", "the first tab is read as cells though it is no grid", "documents/reader.py", (
        ("sorted((s for s in sheets if is_grid(s))", "sorted((s for s in sheets)"),),
        ("tests/test_documents_grants.py::test_a_spreadsheet_whose_first_tab_is_not_a_grid_reads_its_first_grid_and_names_the_rest",
         "tests/test_documents_rules.py::test_a_tab_that_is_not_a_grid_is_never_the_range_read_and_is_named")),
    Mutant("H8", "a reference synced block's content vanishes", "documents/render.py", (
        ('if kind == "reference_synced" and not _children(block):', "if False:"),),
        ("tests/test_documents_grants.py::test_a_reference_synced_block_shows_its_source_to_those_who_may_view_the_source",
         "tests/test_documents_rules.py::test_synced_blocks_show_their_content")),
    Mutant("H9", "synced content from a document the asker may not view is shown", "documents/selection.py", (
        ("if doc.sources and not self._sources_allowed(doc.sources):", "if False:"),),
        ("tests/test_documents_grants.py::test_a_reference_synced_block_shows_its_source_to_those_who_may_view_the_source",)),
    Mutant("H10", "docx reads are not paced", "feishu/docs.py", (
        ("            with self.pacer.slot(pace):\n", "            if True:\n"),),
        ("tests/test_documents_grants.py::test_the_docx_limit_holds_across_workers_and_file_sizes_are_not_asked_twice",)),
    Mutant("H11", "a file's size is downloaded again every turn", "documents/reader.py", (
        ("        key = doc_keys.doc_file_size(self.keys, token, modified)\n        cached = self.r.get(key)",
         "        key = doc_keys.doc_file_size(self.keys, token, modified)\n        cached = None"),),
        ("tests/test_documents_grants.py::test_the_docx_limit_holds_across_workers_and_file_sizes_are_not_asked_twice",)),
    Mutant("H12", "topic history needs only the read scope", "feishu/capabilities.py", (
        ('               also=("im:message.group_msg",)),', "               also=()),"),),
        ("tests/test_doctor.py::test_scope_rows_follow_the_documented_lists",)),
    Mutant("H13", "a synced block's source is checked for one sender of a batch only", "documents/selection.py", (
        ("for source in sources for s in self.senders)", "for source in sources for s in self.senders[-1:])"),),
        ("tests/test_documents_grants.py::test_a_batch_of_several_senders_sees_synced_content_only_if_every_sender_may",)),
    # (end of H)

    # -- issue 23: streaming cards and rendered answers: S* ----------------------------------------------------
    Mutant("S1", "streaming updates are paced by the API's minute and the app's second again", "runs/outbox.py", (
        ("        for scope, limit, window in [_card_scope(card)]:",
         '        for scope, limit, window in [*self._scopes(chat_id, False, "card_content"), _card_scope(card)]:'),),
        ("tests/test_streaming_limits.py::test_streaming_updates_are_paced_per_card_not_by_the_app_tier",
         "tests/test_pacing.py::test_a_streaming_cards_updates_take_the_cards_ten_a_second_not_the_apps_tier")),
    Mutant("S2", "streaming updates are not paced by the card's 10 a second", "runs/outbox.py", (
        ("        for scope, limit, window in [_card_scope(card)]:", "        for scope, limit, window in []:"),),
        ("tests/test_pacing.py::test_a_streaming_cards_updates_take_the_cards_ten_a_second_not_the_apps_tier",)),
    Mutant("S3", "the emulator counts ops on a streaming card against the API tier", "sandbox/feishu/cardkit.py", (
        ("        if not entity.streaming:  # documented", "        if True:  # documented"),),
        ("tests/test_sandbox_cardkit.py::test_the_app_tier_spares_cards_in_streaming_mode",
         "tests/test_streaming_limits.py::test_streaming_updates_are_paced_per_card_not_by_the_app_tier")),
    Mutant("S4", "streaming that closed by itself (200850) is not turned on again", "turn/stream.py", (
        ("                if exc.code != cardkit.STREAM_TIMEOUT or attempt == 2:", "                if True:"),),
        ("tests/test_streaming.py::test_a_turn_longer_than_the_streaming_window_turns_streaming_on_again",)),
    Mutant("S5", "the streaming card's summary is a custom [生成中...] again", "feishu/cardkit.py", (
        ('SUMMARY_STREAMING = ""', 'SUMMARY_STREAMING = "[生成中...]"'),),
        ("tests/test_streaming.py::test_the_chat_list_shows_feishus_own_placeholder_then_a_plain_summary",
         "tests/test_sandbox_cardkit.py::test_streaming_times_out_and_settings_reopen_it")),
    Mutant("S6", "the finished card's summary is the card's Markdown", "turn/stream.py", (
        ("                self._final(card_markdown(first, self.people), plain_summary(first, self.people))",
         "                self._final(card_markdown(first, self.people), card_markdown(first, self.people)[:60])"),),
        ("tests/test_streaming.py::test_the_chat_list_shows_feishus_own_placeholder_then_a_plain_summary",)),
    Mutant("S7", "the emulator misses [生成中...] left on a finished card", "sandbox/feishu/card_render.py", (
        ("    if not streaming(card) and chat_preview(card) == STREAMING_PREVIEW:", "    if False:"),),
        ("tests/test_sandbox_cardkit.py::test_what_feishu_accepts_but_shows_badly_is_a_render_defect",)),
    Mutant("S8", "the emulator misses markup in a summary", "sandbox/feishu/card_render.py", (
        ("    if summary and _MARKUP.search(summary):", "    if False:"),),
        ("tests/test_sandbox_cardkit.py::test_what_feishu_accepts_but_shows_badly_is_a_render_defect",)),
    Mutant("S9", "a reply card takes any number of tables", "feishu/render.py", (
        ('        for piece in split_tables(part, CARD_TABLES_MAX) if style == "interactive" else [part]:',
         "        for piece in [part]:"),),
        ("tests/test_card_limits.py::test_a_rendered_reply_within_the_limits_is_accepted_and_shows_well",
         "tests/test_card_limits.py::test_a_reply_with_many_tables_becomes_cards_of_five_in_elements_of_four")),
    Mutant("S10", "a reply card's tables all go in one markdown element", "feishu/render.py", (
        ("        for element in split_tables(text, MARKDOWN_TABLES_MAX):", "        for element in [text]:"),),
        ("tests/test_card_limits.py::test_a_rendered_reply_within_the_limits_is_accepted_and_shows_well",
         "tests/test_card_limits.py::test_a_reply_with_many_tables_becomes_cards_of_five_in_elements_of_four")),
    Mutant("S11", "a reply's indented fences are sent as written", "feishu/render.py", (
        ("    for part in split_markdown(dedent_fences(answer), chunk_chars):",
         "    for part in split_markdown(answer, chunk_chars):"),),
        ("tests/test_card_limits.py::test_a_rendered_reply_within_the_limits_is_accepted_and_shows_well",
         "tests/test_card_limits.py::test_a_reply_with_many_tables_becomes_cards_of_five_in_elements_of_four")),
    Mutant("S12", "an opening fence keeps its indent", "feishu/cardmd.py", (
        ("                line = line[len(m.group(1)):]", "                line = line"),),
        ("tests/test_card_limits.py::test_indented_fences_move_to_the_start_of_their_lines",
         "tests/test_card_limits.py::test_a_rendered_reply_within_the_limits_is_accepted_and_shows_well")),
    Mutant("S13", "the streamed text shows every table in one element", "turn/stream.py", (
        ("        return card_markdown(before_table(dedent_fences(head), MARKDOWN_TABLES_MAX), self.people)",
         "        return card_markdown(head, self.people)"),),
        ("tests/test_streaming.py::test_many_tables_and_an_indented_fence_stream_within_the_card_limits",)),
    Mutant("S14", "the finished streaming card takes any number of tables", "turn/stream.py", (
        ("    first, *more = split_tables(parts[0], CARD_TABLES_MAX)", "    first, *more = [parts[0]]"),),
        ("tests/test_streaming.py::test_many_tables_and_an_indented_fence_stream_within_the_card_limits",)),
    Mutant("S15", "the finished streaming card's tables all go in one element", "feishu/cardkit.py", (
        ("    for i, part in enumerate(split_tables(text, MARKDOWN_TABLES_MAX)):",
         "    for i, part in enumerate([text]):"),),
        ("tests/test_streaming.py::test_many_tables_and_an_indented_fence_stream_within_the_card_limits",)),
    Mutant("S16", "the emulator accepts a card of more than five tables", "sandbox/feishu/rules.py", (
        ("    if tables > CARD_TABLES_MAX:", "    if False:"),),
        ("tests/test_sandbox_cardkit.py::test_a_card_with_more_than_five_tables_is_refused",)),
    Mutant("S17", "the emulator misses a markdown element of more than four tables", "sandbox/feishu/card_render.py", (
        ("        if tables > MARKDOWN_TABLES_MAX:", "        if False:"),),
        ("tests/test_sandbox_cardkit.py::test_what_feishu_accepts_but_shows_badly_is_a_render_defect",)),
    Mutant("S18", "the emulator misses an indented code fence", "sandbox/feishu/card_render.py", (
        ("        if fence:", "        if False:"),),
        ("tests/test_sandbox_cardkit.py::test_what_feishu_accepts_but_shows_badly_is_a_render_defect",)),
    Mutant("S19", "a mention whose name is unknown reads as a bare @ in the summary", "feishu/cardmd.py", (
        ('        return "@" + open_id if open_id not in people else '
         '("@" + people[open_id] if people[open_id] else "")',
         '        return "@" + open_id if open_id not in people else "@" + people[open_id]'),),
        ("tests/test_card_limits.py::test_the_summary_is_plain_text",
         "tests/test_streaming.py::test_the_chat_list_shows_feishus_own_placeholder_then_a_plain_summary")),
    # (end of S)

    # -- issue 23: links to topics and answers, read_thread progress: L* ---------------------------------------
    Mutant("L1", "a thread page with no room for a whole message shows nothing (no head, no offset)",
           "turn/pages.py", (
        ("            head = self._head(item, mid, room - used)  # the page's has_more says more follows",
         "            head = None"),),
        ("tests/test_recall.py::test_a_page_in_a_tiny_room_shows_the_head_of_its_first_message_and_moves_on",)),
    Mutant("L2", "a thread page reserves a fixed 220 tokens for its frame instead of measuring it",
           "turn/pages.py", (
        ('        frame = self.b.cost(page_head(thread_id, cursor or "", longest, True, note) + PAGE_END)',
         "        frame = 220 + self.b.cost(note)"),),
        ("tests/test_recall.py::test_a_page_in_a_tiny_room_shows_the_head_of_its_first_message_and_moves_on",)),
    Mutant("L3", "a read that found the request full does not end the tool rounds", "turn/recall.py", (
        ("        final = n == MAX_ROUNDS or room < MIN_ROOM or reader.full",
         "        final = n == MAX_ROUNDS or room < MIN_ROOM"),),
        ("tests/test_recall.py::test_a_read_that_finds_the_request_full_ends_the_tool_rounds",)),
    Mutant("L4", "the stand-in takes the service's recall note for the user asking to read the thread",
           "sandbox/claude/recall.py", (
        ('            question = _RECALL_STATE.sub("", said)', '            question = said'),),
        ("tests/test_recall.py::test_the_stand_in_reads_the_thread_only_when_a_person_asks",)),
    Mutant("L5", "首答链接 is the topic's AppLink even when Feishu answered the card's post with its own link",
           "items/first_answer.py", (
        ('            values["answer_link"] = answer_link(self.item.answer_link, self.rt.settings.feishu_web_origin,',
         '            values["answer_link"] = answer_link("", self.rt.settings.feishu_web_origin,'),),
        ("tests/test_items_attack.py::test_the_records_links_open_the_topic_and_the_first_answer",)),
    Mutant("L6", "the first answer's message_app_link is not kept with the item", "items/first_answer.py", (
        ("answer_message_id=sent.message_id, answer_link=sent.app_link)", "answer_message_id=sent.message_id)"),),
        ("tests/test_items_attack.py::test_the_records_links_open_the_topic_and_the_first_answer",)),
    Mutant("L7", "a link whose host or scheme Feishu did not vouch for is written as 首答链接", "bitable/refs.py", (
        ('    return app_link if SAFE_LINK.fullmatch(app_link or "") else', "    return app_link if app_link else"),),
        ("tests/test_segments.py::test_the_first_answers_link_is_feishus_message_app_link_or_the_topics",)),
    Mutant("L8", "the chat AppLinks written before are not read as the topic's", "bitable/refs.py", (
        ('    if parts.path == "/client/chat/open" and parts.hostname in APPLINK_HOSTS:', "    if False:"),),
        ("tests/test_segments.py::test_links_written_before_are_read_as_the_topics_applink",
         "tests/test_digest_pure.py::test_a_title_links_to_the_topic_even_when_the_record_holds_an_old_chat_link",
         "tests/test_items_attack.py::test_a_record_naming_a_topic_by_an_old_chat_link_is_linked_and_rewritten")),
    Mutant("L9", "a record's old chat link to its topic is kept when the record is linked", "items/claim.py", (
        ("            or any(openable(link) != link for link in links):", "            or False:"),),
        ("tests/test_items_attack.py::test_a_record_naming_a_topic_by_an_old_chat_link_is_linked_and_rewritten",)),
    Mutant("L10", "the digest links a title to the link as the record holds it", "timers/digest.py", (
        ('        topic_link=openable(links[0] if links else record.text(name("topic_link")).strip()),',
         '        topic_link=(links[0] if links else record.text(name("topic_link")).strip()),'),),
        ("tests/test_digest_pure.py::test_a_title_links_to_the_topic_even_when_the_record_holds_an_old_chat_link",)),
    Mutant("L11", "the emulator's send and reply answers carry no message_app_link", "sandbox/feishu/store.py", (
        ('        return {**copy.deepcopy(msg), "message_app_link": self.app_links[msg["message_id"]]}',
         "        return copy.deepcopy(msg)"),),
        ("tests/test_sandbox_emulators.py::test_sends_and_replies_answer_with_the_messages_app_link",)),
    Mutant("L12", "issue 23 A7 as it was: a fixed frame reserve, and a page with no room shows nothing and stays put",
           "turn/pages.py", (
        ('        frame = self.b.cost(page_head(thread_id, cursor or "", longest, True, note) + PAGE_END)',
         "        frame = 220 + self.b.cost(note)"),
        ("            return (_joined(parts), i, True) if head is None else (_joined([*parts, head]), i + 1, False)",
         "            return _joined([*parts, _not_shown(len(items) - i)]), i, False"),),
        ("tests/test_recall.py::test_a_tight_request_never_gets_a_thread_page_that_shows_nothing",)),
    # (end of L)

    # -- issue 25: memory that outlives sessions: M* -------------------------------------------------------------
    Mutant("M1", "a write does not check the scope's version (last writer wins)", "memory/scopes/store.py", (
        ("if version ~= tonumber(ARGV[1]) then return -1 end", "if false then return -1 end"),),
        ("tests/test_memories_store.py::test_racing_writers_lose_nothing",)),
    Mutant("M2", "a chat's memory is writable by any member", "memory/scopes/paths.py", (
        ("        if chat_writers:\n", "        if True:\n"),),
        ("tests/test_memories.py::test_a_team_rule_is_kept_only_from_the_owner_and_reaches_every_route_of_that_chat",
         "tests/test_memories_store.py::test_a_batch_grants_its_senders_its_chat_to_read_and_its_item")),
    Mutant("M3", "the tool writes any scope the path names", "memory/scopes/tool.py", (
        ("        scope = self.grant.check(where, writing=True)\n",
         "        scope = where.scope if where.scope is not None else self.grant.check(where, writing=True)\n"),),
        ("tests/test_memories.py::test_nothing_a_document_quote_or_record_says_writes_another_persons_or_the_teams_memory",)),
    Mutant("M4", "a consolidation applies its round although the scope changed meanwhile", "memory/scopes/dream.py", (
        ("        if store.version(scope) != version or dict(current) != original:\n",
         "        if False:\n"),),
        ("tests/test_memories.py::test_a_write_during_a_consolidation_is_kept_and_the_consolidation_applies_on_top_of_it",)),
    Mutant("M5", "loaded memory is not held to its budget share", "memory/scopes/part.py", (
        ("        room = int(budget.total * memory_settings(self.turn.rt.settings).memory_budget_share)",
         "        room = int(budget.total * 10)"),),
        ("tests/test_memories.py::test_a_full_scope_stays_within_budget_loads_instructions_whole_and_indexes_the_rest",
         "tests/test_memories_budget.py::"
         "test_a_batch_from_thirty_people_loads_what_fits_and_stays_within_the_memory_budget")),
    Mutant("M6", "/reset forgets the resetter's memory", "memory/scopes/commands.py", (
        ('    return Said(say("memory_kept_on_reset", c.message.text))',
         '    store_of(c.rt).change(Scope("people", c.message.sender_id), "reset", "reset", dict.fromkeys)\n'
         '    return Said(say("memory_kept_on_reset", c.message.text))'),),
        ("tests/test_memories.py::test_memory_commands_are_visible_in_the_next_request_and_reset_keeps_memory",)),
    Mutant("M7", "what a reminder said unasked does not enter the route's transcript", "timers/feature.py", (
        ("        c.told.extend(told_entries(t, c.batch_id, c.rt.settings.tz))", "        pass"),),
        ("tests/test_memories.py::test_a_reminder_fired_yesterday_is_known_as_told_today",)),
    Mutant("M8", "a digest is not known to the chat's routes", "timers/digest_run.py", (
        ("    related.keep_own(rt.state, rt.keys, t.chat_id, message_id,",
         "    (lambda *a: None)(rt.state, rt.keys,"),),
        ("tests/test_memories.py::test_a_digest_posted_this_morning_is_known_in_the_chats_routes",)),
    Mutant("M9", "a retried turn's insert doubles the line", "memory/scopes/tool.py", (
        ("            if _holds(lines, new.split(\"\\n\")):\n", "            if False:\n"),),
        ("tests/test_memories_store.py::test_a_retried_turn_writing_again_remembers_each_line_once_and_names_no_change",)),
    Mutant("M10", "/forget n deletes the chat's memory for a member", "memory/scopes/commands.py", (
        ("    if e.scope not in g.write or (", "    if False and ("),),
        ("tests/test_memories.py::test_forget_is_refused_for_the_teams_memory_unless_owner",)),
    Mutant("M11", "a consolidation's own write keeps the scope marked as changed (consolidated every night)",
           "memory/scopes/store.py", (
        ("  redis.call('ZREM', KEYS[4], ARGV[8])  -- what it read",
         "  redis.call('ZADD', KEYS[4], ARGV[2], ARGV[8])  -- "),),
        ("tests/test_memories.py::test_consolidation_keeps_the_newer_owner_says_since_when_and_was_and_a_failed_one_changes_nothing",)),
    Mutant("M12", "an owner who could not be looked up is reported as 'not the owner'", "memory/scopes/part.py", (
        ("chat_writers=writers, owner_known=owner is not None)", "chat_writers=writers, owner_known=True)"),),
        ("tests/test_memories.py::test_without_the_group_info_scope_only_a_memory_admin_changes_the_teams_memory_and_the_reply_says_why",)),
    Mutant("M13", "an unknown owner is cached (a scope granted later counts only after the cache expires)",
           "memory/scopes/part.py", (
        ('                                                                                        "error": str(exc)})\n'
         "        return None",
         '                                                                                        "error": str(exc)})\n'
         '        rt.state.set(key, "", ex=OWNER_CACHE_S)\n        return None'),),
        ("tests/test_memories.py::test_without_the_group_info_scope_only_a_memory_admin_changes_the_teams_memory_and_the_reply_says_why",)),
    Mutant("M14", "the migration deletes old notes before their scope holds them", "memory/scopes/migrate.py", (
        ("        if moves and not kept and not dry_run and all(ok for _line, ok in moved):",
         "        if not dry_run:"),),
        ("tests/test_memories_store.py::test_old_notes_move_into_their_scopes_once_and_the_deployment_wide_ones_stay",)),
    Mutant("M15", "the lines saying whose each scope is are not counted against memory's room",
           "memory/scopes/part.py", (
        ("        need = self.cost(text) + (0 if scope in self.shown else",
         "        need = self.cost(text) + (0 if True else"),),
        ("tests/test_memories_budget.py::"
         "test_a_batch_from_thirty_people_loads_what_fits_and_stays_within_the_memory_budget",)),
    Mutant("M16", "a consolidation shows every file whatever the budget", "memory/scopes/dream.py", (
        ("        if used + budget.cost(xml) <= budget.total * FILES_SHARE:", "        if True:"),),
        ("tests/test_memories_budget.py::"
         "test_a_consolidation_of_a_full_scope_asks_within_the_budget_and_names_what_it_could_not_show",)),
    Mutant("M17", "a scope changed again between the slot and the sweeper's look waits a night",
           "memory/scopes/dream.py", (
        ('    scopes = [str(s) for s in rt.state.zrangebyscore(scope_keys.memory_changed(rt.keys), "-inf", at)]',
         '    scopes = [str(s) for s in rt.state.zrangebyscore(scope_keys.memory_changed(rt.keys), "-inf", slot)]'),),
        ("tests/test_memories_budget.py::test_a_scope_changed_again_after_the_slot_is_still_consolidated_that_night",)),
    # (end of M)

    # -- issue 26: the operator console: K* ----------------------------------------------------------------------
    Mutant("K1", "a console page is served without a sign-in", "console/web.py", (
        ("    op = signins().find(request.cookies.get(COOKIE))\n    if op is None:\n",
         "    op = signins().find(request.cookies.get(COOKIE))\n    if op is None and False:\n"),),
        ("tests/test_console.py::test_without_a_sign_in_every_page_redirects_to_it_and_every_action_is_403",)),
    Mutant("K2", "a console POST without its CSRF token is carried out", "console/web.py", (
        ('    if request.method == "POST" and not csrf_ok(op.csrf, request.form.get("csrf")):',
         '    if False:'),),
        ("tests/test_console.py::test_a_post_without_its_csrf_token_is_403_and_changes_nothing",)),
    Mutant("K3", "any Feishu user may sign in to the console", "console/signin.py", (
        ("    return bool(open_id) and open_id in settings.console_operators",
         "    return bool(open_id)"),),
        ("tests/test_console.py::test_feishu_sign_in_lets_a_console_admin_in_and_refuses_anyone_else",)),
    Mutant("K4", "a Feishu sign-in's state is not bound to the browser that began it", "console/signin.py", (
        ("        if not rec or not browser or not hmac.compare_digest(", "        if not rec or False and ("),),
        ("tests/test_console.py::test_a_sign_in_code_is_single_use_and_a_callback_from_another_browser_is_refused",)),
    Mutant("K5", "the token sign-in form takes a POST without its CSRF token", "console/login.py", (
        ('    if not csrf_ok(_pre_given(), request.form.get("csrf")):', "    if False:"),),
        ("tests/test_console.py::test_token_sign_in_needs_the_login_forms_csrf_and_the_right_token",)),
    Mutant("K6", "the console's CSP allows inline script", "console/web.py", (
        ("CSP = (\"default-src 'none'; script-src 'self'; ",
         "CSP = (\"default-src 'none'; script-src 'self' 'unsafe-inline'; "),),
        ("tests/test_console.py::test_hostile_text_is_shown_as_text_under_a_policy_without_inline_script",)),
    Mutant("K7", "a turn's text is rendered as markup on the route page", "console/templates/console/route.html", (
        ("  <pre>{{ t.text }}</pre>", "  <pre>{{ t.text | safe }}</pre>"),),
        ("tests/test_console.py::test_hostile_text_is_shown_as_text_under_a_policy_without_inline_script",)),
    Mutant("K8", "a follow-up's text is rendered as markup on the timers page",
           "console/templates/console/timers.html", (
        ("<td>{{ t.what }}</td>", "<td>{{ t.what | safe }}</td>"),),
        ("tests/test_console_browser.py::test_hostile_text_is_text_on_every_page_that_lists_it_and_no_dialog_fires",)),
    Mutant("K9", "a dead letter is discarded twice (and a discarded one may be replayed)", "runs/inbox_lua.py", (
        ("local raw = redis.call('HGET', KEYS[1], ARGV[1])\nif not raw then return 0 end",
         "local raw = redis.call('HGET', KEYS[1], ARGV[1]) or '{}'"),),
        ("tests/test_console.py::test_a_dead_letter_discarded_once_is_never_answered_and_cannot_be_replayed",)),
    Mutant("K10", "rq-dashboard's pages are open without a console sign-in", "console/rqdash.py", (
        ("    op = signins().find(request.cookies.get(COOKIE))\n    if op is None:\n",
         "    op = signins().find(request.cookies.get(COOKIE))\n    if op is None and False:\n"),),
        ("tests/test_console.py::test_without_a_sign_in_every_page_redirects_to_it_and_every_action_is_403",)),
    Mutant("K11", "rq-dashboard's actions are taken from another site", "console/rqdash.py", (
        ("        if not _same_origin():", "        if False:"),),
        ("tests/test_console.py::test_rq_dashboard_is_behind_the_sign_in_and_reads_the_json_jobs",)),
    Mutant("K12", "a sign-in sends the browser back anywhere (open redirect)", "console/web.py", (
        ('    if parts.scheme or parts.netloc or not target.startswith("/console/") or target.startswith("//"):',
         "    if False:"),),
        ("tests/test_console_pure.py::test_after_sign_in_the_browser_goes_back_only_to_a_console_page",)),
    Mutant("K13", "console actions are not audited", "console/web.py", (
        ("    audit.write(rt().state, rt().keys, audit.Done(op.who, op.how, what, target, outcome))", "    pass"),),
        ("tests/test_console.py::test_every_action_is_in_the_audit_log_with_who_did_it",)),
    Mutant("K14", "the routing simulator ignores the running configuration", "console/simulator.py", (
        ("    route = route_for(inbound, x.policy, x.settings.bot_profile)",
         "    route = route_for(inbound, type(x.policy)(), x.settings.bot_profile)"),),
        ("tests/test_console.py::test_the_routing_simulator_names_the_key_the_service_used",)),
    Mutant("K15", "signing out leaves the sign-in valid for whoever kept the cookie", "console/login.py", (
        ("    signins().close(op.sid)\n", "    pass\n"),),
        ("tests/test_console.py::test_token_sign_in_needs_the_login_forms_csrf_and_the_right_token",)),
    Mutant("K16", "the route indexes never expire (an idle chat's index stays forever)", "runs/inbox.py", (
        ("                pipe.expire(key, self.route_retention_s)\n", "                pass\n"),),
        ("tests/test_inbox.py::test_a_route_index_drops_routes_past_their_retention_when_trimmed_not_per_batch",)),
    Mutant("P1", "a card click goes to items whatever action its button names", "turn/session.py", (
        ('    action = app.actions.get(name or app.action_for(value) or "")',
         '    action = app.actions.get("items:approve")'),),
        ("tests/test_plugins.py::test_a_feature_outside_the_product_runs_next_to_items_buttons",)),
    Mutant("P2", "a second feature's declaration silently replaces the first's", "turn/registry.py", (
        ("        if what in self._owner or (kind ==", "        if False and (kind =="),),
        ("tests/test_plugins.py::test_a_second_declaration_of_the_same_thing_is_refused_at_build",)),
    Mutant("P3", "a button no feature claims is queued for items", "bot/side_events.py", (
        ("        name = self.app.action_for(value) if value is not None else None",
         '        name = self.app.action_for(value) or "items:approve" if value is not None else None'),),
        ("tests/test_plugins.py::test_a_button_no_feature_claims_gets_a_polite_toast_and_a_log_line",)),
    Mutant("P4", "a card posted before actions were namespaced is nobody's", "turn/registry.py", (
        ("        return next((n for n, a in self.actions.items() if a.legacy is not None and a.legacy(dict(value)))"
         ", None)", "        return None"),),
        ("tests/test_plugins.py::test_two_features_buttons_of_the_same_name_never_collide",)),
    Mutant("P5", "a poll counts any number of voters", "polls/store.py", (
        ("if not old and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then return 'full' end", ""),),
        ("tests/test_polls.py::test_a_poll_counts_one_vote_per_person_and_posts_its_result_when_it_closes",)),
    Mutant("P6", "a closed poll still takes votes", "polls/store.py", (
        ("if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 'closed' end",
         "if redis.call('HGET', KEYS[1], 'state') == nil then return 'closed' end"),),
        ("tests/test_polls.py::test_a_poll_counts_one_vote_per_person_and_posts_its_result_when_it_closes",)),
    Mutant("P7", "a timer's kind is looked up in a fixed table, not the App", "timers/fire.py", (
        ("    handler = app_of(c.rt).timer_kinds.get(t.kind)", "    handler = {}.get(t.kind)"),),
        ("tests/test_plugins.py::test_a_feature_outside_the_product_runs_next_to_items_buttons",)),
    Mutant("R30", "every scope loaded in a turn gets a routes set, memory or not", "memory/scopes/part.py", (
        ("  if redis.call('EXISTS', KEYS[i]) == 1 then\n", "  if true then\n"),),
        ("tests/test_expiry.py::test_one_turn_routes_by_new_people_leave_fewer_than_5_keys_without_an_expiry",)),
    Mutant("R31", "a scope's routes set never expires", "memory/scopes/part.py", (
        ("    redis.call('EXPIRE', KEYS[i + 1], ARGV[3])\n", ""),),
        ("tests/test_expiry.py::test_a_scope_that_holds_memory_keeps_the_routes_it_was_loaded_in_for_two_days",)),
    Mutant("R32", "a console sign-in's HSET and EXPIRE are two commands (a crash between leaves it forever)",
           "console/signin.py", (
               ("        pipe = self.r.pipeline(transaction=True)  # one MULTI/EXEC: never a sign-in without its "
                "expiry",
                "        pipe = self.r.pipeline(transaction=False)"),),
        ("tests/test_expiry.py::test_a_console_sign_in_is_written_with_its_expiry_in_one_transaction",)),
    Mutant("R33", "a Feishu sign-in's state and its expiry are two commands", "console/signin.py", (
        ("        pipe = self.r.pipeline(transaction=True)\n"
         "        pipe.hset(console_keys.console_oauth(self.keys, state)",
         "        pipe = self.r.pipeline(transaction=False)\n"
         "        pipe.hset(console_keys.console_oauth(self.keys, state)"),),
        ("tests/test_expiry.py::test_a_feishu_sign_in_under_way_is_written_with_its_expiry_in_one_transaction",)),
    Mutant("R34", "the wrong-token counter gets no expiry (a client locked out for good)", "console/lockout.py", (
        ("if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return n", "return n"),),
        ("tests/test_console_pure.py::test_a_wrong_token_counter_is_never_without_its_expiry",)),
    Mutant("R50", "the admin API takes unlimited wrong tokens", "bot/admin.py", (
        ("        wait = lockout.refusal(_runtime(), right)\n", "        wait = 0\n"),),
        ("tests/test_console_edge.py::test_the_admin_apis_11th_wrong_token_from_a_client_is_refused",)),
    Mutant("R51", "a lockout refuses the right token too", "console/lockout.py", (
        ("    if right:\n        if int(rt.state.get(key) or 0) >= LIMIT:\n"
         "            time.sleep(SLOW_S)\n        return 0\n",
         "    if right and int(rt.state.get(key) or 0) < LIMIT:\n        return 0\n"),),
        ("tests/test_console_edge.py::test_a_lockout_never_refuses_the_right_token",)),
    Mutant("R52", "wrong tokens are counted per socket address behind a trusted proxy", "console/lockout.py", (
        ("    return client_of(request.remote_addr or \"\", request.headers.get(\"X-Forwarded-For\", \"\"),",
         "    return client_of(request.remote_addr or \"\", \"\","),),
        ("tests/test_console_edge.py::test_behind_a_trusted_proxy_each_client_is_counted_apart",)),
    Mutant("R53", "answers no console view made carry no security headers", "console/__init__.py", (
        ("    app.after_request(headers)\n", ""),),
        ("tests/test_console_edge.py::test_an_answer_no_view_made_under_console_carries_the_security_headers",)),
    Mutant("R54", "the OAuth redirect_uri is built from the Host header outside sandbox mode", "console/login.py", (
        ("    base = s.console_url or (request.host_url if s.sandbox else \"\")",
         "    base = s.console_url or request.host_url"),),
        ("tests/test_console_edge.py::test_a_foreign_host_never_becomes_the_redirect_uri",)),
    Mutant("R55", "the pre-sign-in cookie is taken unsigned", "console/login.py", (
        ("def _pre_given() -> str:\n    return signins().unsign(request.cookies.get(PRE_COOKIE)) or \"\"\n",
         "def _pre_given() -> str:\n    return request.cookies.get(PRE_COOKIE) or \"\"\n"),),
        ("tests/test_console_edge.py::test_a_pre_sign_in_cookie_the_console_did_not_sign_is_never_trusted",)),
    # (end of R5)
    Mutant("R1", "bench.ingest passes whatever the throughput ratio", "bench/ingest.py", (
        ("    problems += [f\"{name} {r:.3f}\" for name, r in ratios.items() if r < FLOOR_RATIO]",
         "    problems += [f\"{name} {r:.3f}\" for name, r in ratios.items() if r < 0]"),),
        ("tests/test_bench_ingest.py::test_the_benchmark_exits_1_when_any_ratio_is_below_the_floor",)),
    Mutant("R2", "the webhook's PUSH indexes the route again (the index upkeep back on the request path)",
           "runs/inbox_lua.py", (
        ("redis.call('HINCRBY', KEYS[7], 'events_queued', 1)\nif redis.call",
         "redis.call('HINCRBY', KEYS[7], 'events_queued', 1)\n"
         "redis.call('ZADD', (string.gsub(KEYS[5], 'dirty$', 'routes')), ARGV[5], ARGV[4])\nif redis.call"),),
        ("tests/test_ingress_http.py::test_an_accepted_event_is_one_script_call_that_leaves_the_route_indexes_to_its_run",)),
    Mutant("R3", "a run never indexes the routes it takes (the console finds no chat, person or topic)",
           "jobs/drain.py", (
        ("        self.rt.inbox.index(self.rk, index_ids(items))", "        index_ids(items)"),),
        ("tests/test_pipeline.py::test_the_run_that_takes_a_message_indexes_its_route_by_chat_person_and_topic",)),
    Mutant("R4", "nothing trims a route index (routes past their retention stay listed)", "runs/inbox.py", (
        ('        return int(self.r.zremrangebyscore(index, "-inf", cut))', "        return 0"),),
        ("tests/test_inbox.py::test_a_route_index_drops_routes_past_their_retention_when_trimmed_not_per_batch",)),
    Mutant("R5", "decrypt's hand-made CBC chain xors each block with the wrong neighbour", "bot/crypto.py", (
        ('int.from_bytes(blob[:-16], "big")', 'int.from_bytes(blob[16:], "big")'),),
        ("tests/test_crypto.py::test_official_test_vector",)),
    Mutant("R6", "a thread's kept AES cipher serves whatever key it is asked for", "bot/crypto.py", (
        ("    found = kept.get(encrypt_key)\n", "    found = next(iter(kept.values()), None)\n"),),
        ("tests/test_crypto.py::test_each_thread_decrypts_with_the_key_it_is_given_among_many",)),
    Mutant("R7", "the fast inbox entry is not the json module's text (the generation slips in)", "core/inbound.py", (
        ('        return inbound.model_dump_json(exclude={"gen"})', "        return inbound.model_dump_json()"),),
        ("tests/test_parsers.py::test_an_inbox_entry_is_the_json_text_of_the_message_without_its_generation",)),
    Mutant("R8", "the group commit writes on a connection the server has closed (a 503 instead of a reconnect)",
           "state/groupcommit.py", (
        ("            stale = conn.can_read()\n", "            stale = False\n"),),
        ("tests/test_groupcommit.py::test_a_dropped_connection_is_reopened_and_the_call_answered",)),
    Mutant("R9", "a forked child writes on its parent's group-commit connection", "state/groupcommit.py", (
        ("        if self._conn is None or self._pid != os.getpid():\n", "        if self._conn is None:\n"),),
        ("tests/test_groupcommit.py::test_a_forked_child_talks_over_its_own_connection",)),
    Mutant("R15", "an ingest outcome's kept counter is never counted", "core/metrics.py", (
        ("    counter.inc()\n", ""),),
        ("tests/test_ingress_http.py::test_health_ready_and_metrics",)),
    Mutant("R16", "the answer encoded once is not the answer", "bot/web.py", (
        ('SUCCESS_JSON = json.dumps(SUCCESS).encode()', 'SUCCESS_JSON = b"{}"'),),
        ("tests/test_ingress_http.py::test_the_trace_check_sees_an_accepted_event",)),
    Mutant("R17", "rq-dashboard's gate hangs on a blueprint no request has (its pages open)", "console/rqdash.py", (
        ("    app.before_request_funcs.setdefault(rq_dashboard.blueprint.name, []).insert(0, _gate)",
         '    app.before_request_funcs.setdefault("rq", []).insert(0, _gate)'),),
        ("tests/test_console.py::test_without_a_sign_in_every_page_redirects_to_it_and_every_action_is_403",)),
    Mutant("R60", "a mid-stream model error (HTTP 200, overloaded_error) is mapped by its status: permanent",
           "claude/client.py", (
        ("    if status < 400:  # a mid-stream error: the HTTP status is the stream's\n"
         "        return _mid_stream(exc)\n", ""),),
        ("tests/test_streaming.py::test_a_model_error_mid_stream_is_retried_and_finishes_the_same_card",)),
    Mutant("R61", "a question recalled while its answer streams is answered in full", "turn/stream.py", (
        ("        if self.recalled():\n", "        if False:\n"),),
        ("tests/test_streaming.py::test_a_question_recalled_mid_stream_stops_its_answer",)),
    Mutant("R62", "a rerun after a kill pushes shorter text than the card shows", "turn/stream.py", (
        ("        if shown == self.shown or (self.card_id and len(shown) <= self.floor):\n",
         "        if shown == self.shown:\n"),
        ("        elif len(shown) > self.floor:\n", "        else:\n"),),
        ("tests/test_streaming.py::test_a_rerun_after_a_kill_never_shows_less_than_the_card_did",)),
    # (end of R6x)
    Mutant("R40", "an unknown memory command escapes the tool (the turn fails and is retried)",
           "memory/scopes/tool.py", (
        ("    if command not in FIELDS:\n", "    if command is None:\n"),),
        ("tests/test_memories_reference.py::test_every_call_answers_as_the_reference_does"
         "[an unknown command]",)),
    Mutant("R41", "a memory create without file_text answers 'created' and stores nothing", "memory/scopes/tool.py", (
        ('"create": {"path": str, "file_text": str}', '"create": {"path": str}'),),
        ("tests/test_memories_reference.py::test_the_deliberate_differences_answer_as_documented"
         "[create without file_text]",)),
    Mutant("R42", "a memory create where a folder is makes a file of that name", "memory/scopes/tool.py", (
        ("            if not where.file or where.file in files or _is_folder(files, where.file):\n",
         "            if where.file in files:\n"),),
        ("tests/test_memories_reference.py::test_every_call_answers_as_the_reference_does"
         "[create where a folder is]",)),
    Mutant("R43", "a memory insert leaves the file without its final newline", "memory/scopes/tool.py", (
        ('"\\n".join(lines).removesuffix("\\n") + "\\n"}', '"\\n".join(lines)}'),),
        ("tests/test_memories_reference.py::test_every_call_answers_as_the_reference_does"
         "[insert at N ends the file with a newline]",)),
    Mutant("R20", "a read that finds no room for one unseen message gives up instead of making room",
           "turn/recall.py", (
               ("        while reader.full and _reading_only(step.tool_uses) and (shrunk := ",
                "        while False and (shrunk := "),),
        ("tests/test_recall.py::test_reading_a_long_topic_under_a_tight_budget_reads_every_message_once",)),
    Mutant("R21", "a stuck read drops nothing of history, only this turn's earlier results", "turn/recall.py", (
        ("    if cut <= start and start >= 2:\n        return messages[cut:], start - cut\n", ""),),
        ("tests/test_recall.py::test_a_stuck_read_makes_room_from_this_turn_s_results_then_the_oldest_whole_exchange",
         "tests/test_recall.py::test_reading_a_long_topic_under_a_tight_budget_reads_every_message_once")),
    Mutant("R10", "an orphaned worker waits on its horse's step however long it takes", "jobs/worker.py", (
        ("    time.sleep(ORPHAN_GRACE_S)\n", "    return\n"),),
        ("tests/test_elastic.py::test_a_sigkilled_supervisor_leaves_no_worker_and_no_horse_alive",)),
    Mutant("R11", "the model SDK's retry swallows the stop: a warm stop waits for the whole turn", "runs/shutdown.py", (
        ("class ShutdownRequested(BaseException):", "class ShutdownRequested(Exception):"),),
        ("tests/test_elastic.py::test_a_sigkilled_supervisor_leaves_no_worker_and_no_horse_alive",)),
    Mutant("R12", "a horse whose RQ worker died goes on taking its route's batches", "jobs/worker.py", (
        ("    wait_parent_gone(worker)\n    shutdown.orphaned()\n", "    wait_parent_gone(worker)\n"),),
        ("tests/test_elastic.py::test_a_horse_whose_worker_dies_finishes_its_step_and_takes_no_further_one",)),
    Mutant("R13", "no SIGTERM when the supervisor dies (no PR_SET_PDEATHSIG, the watcher thinks it was sent)",
           "jobs/worker.py", (
        ("    armed = _pdeathsig(signal.SIGTERM)\n", "    armed = True\n"),),
        ("tests/test_elastic.py::test_a_sigkilled_supervisor_leaves_no_worker_and_no_horse_alive",)),
    Mutant("R14", "the Procfile's worker line runs under a shell whose SIGKILL leaves the pool running", "Procfile", (
        ("worker: exec python -m jobs.worker", "worker: python -m jobs.worker"),),
        ("tests/test_run_e2e.py::test_procfile_service_answers_sandbox_messages",)),
    # (end of R)
    Mutant("Y1", "a delivery posts into a chat the asker is not in", "share/access.py", (
        ("    if not member_now(rt, chat_id, ask.asker):\n", "    if False:\n"),),
        ("tests/test_share.py::test_a_non_member_of_b_a_chat_without_the_bot_and_one_who_left_a_are_refused",)),
    Mutant("Y2", "a delivery never asks whether the bot is in the target chat", "share/access.py", (
        ("    if not _bot_in(rt, chat_id):\n", "    if False:\n"),),
        ("tests/test_share.py::test_a_non_member_of_b_a_chat_without_the_bot_and_one_who_left_a_are_refused",)),
    Mutant("Y3", "a delivery trusts the asker's old membership of the origin chat", "share/access.py", (
        ("    for chat in dict.fromkeys((*origin, *ask.also_in)):", "    for chat in ():"),),
        ("tests/test_share.py::test_a_non_member_of_b_a_chat_without_the_bot_and_one_who_left_a_are_refused",)),
    Mutant("Y4", "the hour's limit is never reached", "share/limit.py", (
        ("if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then", "if false then"),),
        ("tests/test_share.py::test_a_person_gets_n_deliveries_an_hour_and_a_rerun_holds_its_own_slot",
         "tests/test_share.py::test_the_hour_s_limit_a_reset_and_a_missing_scope")),
    Mutant("Y5", "a rerun of the same delivery takes a second slot", "share/limit.py", (
        ("if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return {1, '0'} end\n", ""),),
        ("tests/test_share.py::test_a_person_gets_n_deliveries_an_hour_and_a_rerun_holds_its_own_slot",)),
    Mutant("Y6", "a refusal for the app's missing scope spends the person's slot", "share/access.py", (
        ("        slots.release(ask.asker, ask.key)\n", ""),),
        ("tests/test_share.py::test_the_hour_s_limit_a_reset_and_a_missing_scope",)),
    Mutant("Y7", "a chat name matches whatever the search returns (a near-match, a namesake)", "share/access.py", (
        ("cid for cid, name in seen if same_name(name, target.name)", "cid for cid, name in seen"),),
        ("tests/test_share.py::test_a_member_asking_in_a_gets_the_answer_posted_in_b_with_the_back_link",)),
    Mutant("Y8", "the card is posted around the outbox with a fresh uuid (a retried run posts twice)",
           "share/post.py", (
        ("        sent = rt.outbox.post_card_sent(to, f\"share-{ask.key}\", card)",
         "        import os\n"
         "        sent = rt.feishu.send_sent(granted.chat_id, \"interactive\", card, uuid=os.urandom(8).hex())"),),
        ("tests/test_share.py::test_a_member_asking_in_a_gets_the_answer_posted_in_b_with_the_back_link",)),
    Mutant("Y9", "the delivered result is put into the card as written (mentions, <at id=all>)", "share/card.py", (
        ("    card.markdown(card_markdown(before_table(clip(body.strip(), max_chars), MARKDOWN_TABLES_MAX)))",
         "    card.markdown(clip(body.strip(), max_chars))"),),
        ("tests/test_share.py::test_the_card_names_the_asker_links_back_and_defuses_the_result",)),
    Mutant("Y10", "the tool's grant is never posted after the answer", "share/part.py", (
        ("    for share in (completion.recall or {}).get(\"shares\") or []:", "    for share in []:"),),
        ("tests/test_share.py::test_asked_in_words_in_an_item_topic_the_model_s_tool_posts_the_conclusion",)),
    # W: code-platform webhooks (issue 33)
    Mutant("W1", "a GitHub delivery without a signature is taken as signed", "codehost/signature.py", (
        ("    if not secret or not header:\n        return False\n    given",
         "    if not header:\n        return True\n    given"),),
        ("tests/test_codehost_pure.py::test_a_missing_wrong_or_tampered_github_signature_is_refused",)),
    Mutant("W2", "any GitLab token is taken", "codehost/signature.py", (
        ("    return hmac.compare_digest(header.encode(\"latin-1\", \"replace\"), token.encode(\"utf-8\"))",
         "    return True"),),
        ("tests/test_codehost_pure.py::test_a_gitlab_token_must_equal_the_configured_one",)),
    Mutant("W3", "a failure already told on the same commit is news again", "codehost/threads.py", (
        ("  if not (old and old.state == 'failed' and old.sha == ARGV[2]) then sig = 1 end", "  sig = 1"),),
        ("tests/test_codehost_store.py::test_a_check_is_news_when_it_starts_failing_on_a_commit_and_when_it_recovers",
         "tests/test_codehost_store.py::test_one_failure_told_once_whatever_redelivers_or_reruns_it")),
    Mutant("W4", "CI on an older commit than the pull request's head is told", "codehost/fanout.py", (
        ("        if head and h.sha and head != h.sha:", "        if False:"),),
        ("tests/test_codehost_store.py::test_a_check_on_an_older_commit_than_the_known_head_says_nothing",)),
    Mutant("W5", "a topic's cards ignore the interval", "codehost/topic.py", (
        ("    due = max(now + s.codehost_gather_seconds, float(state.get(\"last\") or 0) + "
         "s.codehost_card_interval_seconds)", "    due = now + s.codehost_gather_seconds"),
        ("    if state.get(\"posted_by\") != t.id and now < float(state.get(\"last\") or 0) + "
         "s.codehost_card_interval_seconds - 1:", "    if False:")),
        ("tests/test_codehost.py::"
         "test_merged_and_changes_requested_arriving_together_are_one_card_and_the_next_waits_a_minute",)),
    Mutant("W6", "an /unwatch is undone by the link seen again", "codehost/watches.py", (
        ("elseif tonumber(redis.call('HGET', KEYS[5], ARGV[7]) or '0') > tonumber(ARGV[2]) then\n  return -3\n",
         "elseif false then\n  return -3\n"),),
        ("tests/test_codehost_store.py::test_unwatch_mutes_the_thread_until_a_watch_command_asks_again",)),
    Mutant("W7", "an item's watches are unbounded", "codehost/watches.py", (
        ("if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end\n", ""),),
        ("tests/test_codehost_store.py::test_a_watch_is_added_once_renewed_when_seen_again_and_bounded_per_item",)),
    Mutant("W8", "a redelivered webhook is stored again", "codehost/ingress.py", (
        ("dumps(entry), message_id=dedupe[0],\n                                 content_key=dedupe[1],",
         "dumps(entry), message_id=__import__('os').urandom(8).hex(),\n"
         "                                 content_key=__import__('os').urandom(8).hex(),"),),
        ("tests/test_codehost.py::test_a_malformed_or_oversized_body_is_refused_and_redelivery_without_ids_is_caught",)),
    Mutant("W9", "outside text on a card keeps its markup and @", "codehost/topic.py", (
        ("    return cut.translate(_MARKUP)", "    return cut"),),
        ("tests/test_codehost_pure.py::test_a_card_shows_outside_text_as_plain_characters_and_mentions_nobody",)),
    Mutant("W10", "quiet triage replies under a platform's comment id", "triage/run.py", (
        ("    if not str(target[\"message_id\"]).startswith(\"om_\"):  # handed over by another feature: under the "
         "topic's root\n        target = {**target, \"message_id\": item.root_id}\n", ""),),
        ("tests/test_codehost.py::test_outside_text_mentions_nobody_and_a_comment_that_instructs_closes_nothing",)),
    Mutant("W11", "a closed item keeps its watches", "codehost/follow.py", (
        ("    if status and status in item_settings(rt.settings).item_closed_statuses:", "    if False:"),),
        ("tests/test_codehost.py::test_links_in_the_record_are_watched_and_end_when_the_item_closes",)),
    Mutant("W12", "a rerun of a delivery's run tells its topic again", "codehost/fanout.py", (
        ("    dedupe = f\"ch:{delivery}:{n}:{item_id}\"",
         "    dedupe = f\"ch:{delivery}:{n}:{item_id}:{time.time()}\""),),
        ("tests/test_codehost_store.py::test_one_failure_told_once_whatever_redelivers_or_reruns_it",)),
    Mutant("W13", "a card for a topic gone from Feishu is retried into dead letters", "codehost/topic.py", (
        ("    except Permanent as exc:  # the topic is gone",
         "    except ZeroDivisionError as exc:  # the topic is gone"),),
        ("tests/test_codehost.py::test_a_topic_gone_from_feishu_gives_its_card_up_without_dead_letters",)),
    # Q: issue 34, the model's side: requests a real model reads right, cheaply.
    Mutant("Q1", "the batch block is no cache breakpoint (the next turn cannot find its prefix)", "claude/cache.py", (
        ("        wanted.append((turn, 0))\n", ""),),
        (MV + "test_a_conversation_is_one_cacheable_prefix_read_from_the_cache_from_its_third_turn",)),
    Mutant("Q2", "the turn's context goes before its batch (what the log keeps is not what was sent first)",
           "turn/rotation.py", (
               ('    blocks = [{"type": "text", "text": batch}, *images]',
                '    blocks = [*([{"type": "text", "text": context}] if context else []), '
                '{"type": "text", "text": batch}, *images]\n    context = ""'),),
        (MV + "test_a_conversation_is_one_cacheable_prefix_read_from_the_cache_from_its_third_turn",)),
    Mutant("Q3", "a topic offers read_thread, other routes do not (three tool lists, three prefixes)",
           "turn/tools.py", (
        ("    del rk\n    return app_of(rt).tools_for(READING, rt)",
         "    return app_of(rt).tools_for(READING if rk.split(':')[2:3] == ['topic'] else READING[1:], rt)"),),
        (MV + "test_a_conversation_is_one_cacheable_prefix_read_from_the_cache_from_its_third_turn",)),
    Mutant("Q4", "no <tools_unavailable> for read_thread outside a topic", "turn/tools.py", (
        ('        out["read_thread"] = "this conversation is not a topic"', "        pass"),),
        (MV + "test_a_conversation_is_one_cacheable_prefix_read_from_the_cache_from_its_third_turn",)),
    Mutant("Q5", "no <state> after a reset", "turn/ask.py", (
        ("if session is None or session.boundary != END_USER_RESET", "if True or session is None"),),
        (MV + "test_a_reset_is_marked_in_the_next_request",)),
    Mutant("Q6", "an item the asker may not see leaves no marker", "items/facts.py", (
        ('        ctx.block = NOT_VISIBLE + "\\n"', '        ctx.block = ""'),),
        ("tests/test_items.py::test_a_reference_from_another_chat_needs_membership_of_the_origin_chat",)),
    Mutant("Q7", "a follow-up that could not be set is an ordinary result, not a tool error", "timers/feature.py", (
        ("            raise ToolRefused(result)  # a tool error", "            return result  # a tool error"),),
        (MV + "test_tools_are_described_and_a_follow_up_that_cannot_be_set_is_a_tool_error",)),
    Mutant("Q8", "quoted messages are never inlined", "turn/quotes.py", (
        ("wanted = list(dict.fromkeys(m.parent_id for m in batch if m.parent_id and not m.thread_id))[:MAX_QUOTES]",
         "wanted: list[str] = []"),),
        (MV + "test_people_are_shown_by_name_and_quoted_messages_are_inlined",)),
    Mutant("Q9", "the bot's own cards read as [interactive]", "turn/thread.py", (
        ("        return card_text(content, bot_open_id)", "        return f\"[{kind}]\""),),
        (MV + "test_the_bots_card_reads_as_text_and_tool_rounds_stay_in_history",)),
    Mutant("Q10", "a topic opened with the bot shows its root twice (bootstrap and batch)", "turn/bootstrap.py", (
        ("        root = None  # the batch itself opens the topic",
         "        pass  # the batch itself opens the topic"),),
        (MV + "test_a_topic_opened_with_the_bot_shows_its_root_once",)),
    Mutant("Q11", "the follow-up check does not see the asking message whole", "timers/followup.py", (
        ('    asked = _asked(rt, rk, state.session_id, t.source_message_id) if t is not None else ""',
         '    asked = ""'),),
        ("tests/test_followups.py::test_the_check_sees_the_asking_message_whole_and_knows_the_asker_is_mentioned",)),
    Mutant("Q12", "/forget all leaves no <state> for the conversations that used the memory",
           "memory/scopes/commands.py", (("            store.mark_cleared(own, ", "            (own, "),),
        ("tests/test_memories.py::test_memory_commands_are_visible_in_the_next_request_and_reset_keeps_memory",)),
    Mutant("Q13", "the compression prompt starts with a literal marker", "memory/compress.py", (
        ('COMPRESSION_SYSTEM = f"""{MARKER} between',
         'COMPRESSION_SYSTEM = f"""<<session-compression v1>>\n{MARKER} between'),),
        ("tests/test_rotation.py::test_a_long_conversation_rotates_and_keeps_what_matters_within_budget",)),
    Mutant("Q14", "the full first answer does not see the summary already shown", "items/first_answer.py", (
        ('                shown = next((v.body for v in reversed(versions) if v.status == SUMMARY), "")',
         '                shown = ""'),),
        ("tests/test_items.py::test_a_topic_report_becomes_one_record_and_a_first_answer_in_three_versions",)),
    Mutant("Q15", "a turn's tool calls and results vanish from history", "turn/recall.py", (
        ("    rounds = kept_rounds(messages[start + 1:], reader.private, b)",
         "    rounds: list[dict[str, Any]] = []"),),
        (MV + "test_the_bots_card_reads_as_text_and_tool_rounds_stay_in_history",)),
    Mutant("Q16", "the memory block does not say the turn's scopes and rights", "memory/scopes/part.py", (
        ("        head = self._rights() + self._cleared()", "        head = self._cleared()"),),
        (MV + "test_the_system_prompt_names_the_bot_and_says_how_people_memory_and_trust_work",)),
    Mutant("Q17", "people are shown by open_id only", "turn/request.py", (
        ("    known = names_of(rt, [i for i, name in found.items() if not name])", "    known: dict[str, str] = {}"),),
        (MV + "test_people_are_shown_by_name_and_quoted_messages_are_inlined",)),
    Mutant("Q18", "the stand-in caches prefixes below the model's minimum", "sandbox/claude/cache.py", (
        ("created = upto[last] - read if last > hit and upto[last] >= least else 0",
         "created = upto[last] - read if last > hit else 0"),
        ("                if upto[i] >= least and i > hit:", "                if i > hit:"),
        ("if entry is not None and entry[0] > now and upto[j] >= least:", "if entry is not None and entry[0] > now:")),
        ("tests/test_standin_cache.py::test_a_prefix_below_the_models_minimum_is_never_cached",)),
    Mutant("Q19", "make eval's duplicate check lets a message shown twice pass", "evals/structure.py", (
        ('shown whole {n} times" for mid, n in seen.items() if n > 1]',
         'shown whole {n} times" for mid, n in seen.items() if n > 2]'),),
        ("tests/test_eval.py::test_each_structure_check_catches_its_defect",)),
    # Z: what reconciling the merges of issues 31-34 added (stop 36)
    Mutant("Z1", "every sender's memory scope gets its own rights line (thirty senders leave no room to load any)",
           "memory/scopes/part.py", (("            if len(scopes) > PEOPLE_LISTED:", "            if False:"),),
        ("tests/test_memories_budget.py::test_a_batch_from_thirty_people_loads_what_fits_and_stays_within_the_memory_budget",)),
    Mutant("Z2", "a delivery's body is JSON-escaped into its content again", "codehost/ingress.py", (
        ("    def content(self) -> str:\n        return self.body\n",
         "    def content(self) -> str:\n        return json.dumps(self.body)\n"),),
        ("tests/test_codehost_store.py::test_a_delivery_is_read_back_in_every_stored_layout",)),
    Mutant("Z3", "share's tool leaves the deployment's one tool list", "share/feature.py", (
        ("    tools=lambda kind: [part.TOOL] if kind in ROUTES else [],", "    tools=lambda kind: [],"),),
        ("tests/test_share.py::test_the_tool_is_in_the_deployment_s_one_tool_list_and_offered_where_people_ask",)),
    Mutant("Z4", "a route index's ZADD and EXPIRE are sent apart (a crash between leaves it forever)",
           "runs/inbox.py", (
        ("        pipe = self.r.pipeline()  # MULTI/EXEC: an index is never left without its expiry",
         "        pipe = self.r.pipeline(transaction=False)"),),
        ("tests/test_expiry.py::test_no_product_code_sets_an_expiry_apart_from_the_write_it_belongs_to",)),
    Mutant("Z5", "input written to the prompt cache is not counted", "core/metrics.py", (
        ('\n               ("cache_write", "cache_creation_tokens"))', ")"),),
        ("tests/test_admin.py::test_metrics_count_across_processes",)),
    Mutant("N1", "a body cut short is handed on as if whole", "bot/lanes.py", (
        ("        if len(body) != length:", "        if False:"),),
        ("tests/test_lanes.py::test_a_body_cut_short_is_a_400_and_nothing_is_stored",)),
    Mutant("N2", "a lane reads a body over its cap", "bot/lanes.py", (
        ("        if length is None or length > lane.max_body:", "        if length is None:"),),
        ("tests/test_lanes.py::test_a_body_over_the_cap_is_flask_s_413_and_nothing_is_read",)),
    Mutant("N3", "a lane answers with another content type than Flask's route", "bot/lanes.py", (
        ('[("Content-Type", "application/json"),', '[("Content-Type", "text/plain"),'),),
        ("tests/test_lanes.py::test_a_lane_answers_as_the_flask_route_it_shortcuts",)),
    Mutant("N4", "the lanes are not installed (every webhook pays Flask's machinery)", "app.py", (
        ("    app.wsgi_app = Lanes(app.wsgi_app, lanes)", "    pass"),),
        ("tests/test_lanes.py::test_a_lane_answers_as_the_flask_route_it_shortcuts",)),
    Mutant("N5", "the webhook takes any message a resetting command matches for a reset", "turn/registry.py", (
        ("        return command is not None and command.resets\n", "        return True\n"),),
        ("tests/test_plugins.py::test_the_webhook_s_reset_check_agrees_with_the_first_command_that_matches",)),
    Mutant("N6", "the sweeper probes a feature's paused component as if it were Feishu's", "jobs/sweeper.py", (
        ("                elif component in probes:", "                elif False:"),),
        ("tests/test_sweeper_features.py::test_a_feature_s_probe_resumes_its_own_paused_component",)),
    Mutant("N7", "a failed side check waits the full hour", "jobs/sweeper.py", (
        ("            ok = task.run(self.rt) is not False", "            ok = True; task.run(self.rt)"),),
        ("tests/test_sweeper_features.py::"
         "test_side_work_runs_on_the_side_thread_and_a_failure_comes_back_after_its_retry",)),
    Mutant("N8", "side work (Open API calls) runs on the dispatch loop", "jobs/sweeper.py", (
        ("            if task.side or now < self.next_periodic.get(task.name, 0.0):",
         "            if now < self.next_periodic.get(task.name, 0.0):"),),
        ("tests/test_sweeper_features.py::"
         "test_side_work_runs_on_the_side_thread_and_a_failure_comes_back_after_its_retry",)),
    Mutant("N9", "the emulator drops a fault bound to its request", "sandbox/feishu/emulator.py", (
        ("            fault = self._faults.take(op, record.pop(FAULT_FIELD, None))",
         "            fault = self._faults.take(op)"),),
        ("tests/test_sandbox_emulators.py::test_a_fault_bound_to_a_request_fails_that_request_and_no_other",)),
    Mutant("N10", "a horse forked after its worker's stop runs a whole turn", "jobs/worker.py", (
        ("        if self.stop_asked:\n            shutdown.before_start()\n", ""),),
        ("tests/test_elastic.py::test_a_stop_that_comes_while_a_worker_forks_its_horse_hands_the_route_over",)),
    Mutant("N11", "the sweeper runs without the cyclic collector", "jobs/sweeper.py", (
        ("    boot.started()  # the imports are done (core/boot.py)\n", ""),),
        ("tests/test_boot.py::test_every_entry_point_of_a_pausing_package_starts_the_collector_before_its_work",)),
    Mutant("N12", "every importer of jobs/ pauses the collector", "core/boot.py", (
        ('    if sys.argv[:1] == ["-m"]:\n', "    if sys.argv:\n"),),
        ("tests/test_boot.py::test_the_collector_pauses_only_while_python_dash_m_locates_the_module",)),
    Mutant("N13", "a feature's settings ignore the values the service's were given", "core/settings.py", (
        ("            got = self._features[model] = _or_exit(lambda: model(**self._given))",
         "            got = self._features[model] = _or_exit(lambda: model())"),),
        ("tests/test_config.py::test_a_features_settings_come_from_where_the_services_came_from",)),
    Mutant("N14", "the web's master does not read the features' settings: workers crash-loop on a bad one",
           "gunicorn.conf.py", (("_settings = load_settings()\nbuild_app(_settings)\n",
                                 "_settings = load_settings()\n"),),
        ("tests/test_config.py::test_a_features_bad_setting_stops_start_up_naming_it",)),
    Mutant("N15", "a worker starts the embedded Redis before it reads the features' settings", "jobs/worker.py", (
        ("    load_app(settings)  # every feature's settings too, before anything starts (a bad one exits here, naming "
         "it)\n", ""),),
        ("tests/test_config.py::test_a_features_bad_setting_stops_start_up_naming_it[worker]",)),
    Mutant("N16", "the state client's connections look redis-py's version up each (~3 ms per new connection)",
           "state/store.py", (("        url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2, "
                               "health_check_interval=30,\n        driver_info=DRIVER,\n",
                               "        url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2, "
                               "health_check_interval=30,\n"),),
        ("tests/test_store_clients.py::test_new_connections_do_not_look_up_redis_pys_version",)),
    Mutant("N17", "bench.ingest passes a run whose server failed its requests", "bench/ingest.py", (
        ("            if n := failed_requests(summary):", "            if n := 0 * failed_requests(summary):"),),
        ("tests/test_bench_ingest.py::test_a_server_that_answered_nothing_or_with_errors_fails_the_run",
         "tests/test_bench_ingest.py::test_the_python_drivers_errors_count_in_both_of_its_phases")),
    Mutant("N18", "a server that answered nothing has no throughput ratio (and passed)", "bench/wrk.py", (
        ("    return round(a / b, 3) if a is not None and b else None",
         "    return round(a / b, 3) if a and b else None"),),
        ("tests/test_bench_ingest.py::test_a_server_that_answered_nothing_or_with_errors_fails_the_run",)),
    Mutant("N19", "bench.hooks passes a run whose targets failed requests", "bench/hooks.py", (
        ("FLOOR and not any(errors.values())", "FLOOR"),),
        ("tests/test_bench_hooks.py::test_the_webhooks_benchmark_fails_below_the_floor_or_on_any_error",)),
    Mutant("W14", "the webhook door keeps less of a delivery than its run reads", "codehost/ingress.py", (
        ("json.dumps([h.to_json() for h in happenings], ensure_ascii=False)",
         'json.dumps([{**h.to_json(), "heads": []} for h in happenings], ensure_ascii=False)'),),
        ("tests/test_codehost_store.py::test_the_door_stores_what_its_run_reads_of_every_published_payload",)),
)


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".venv", "var", ".git", "__pycache__", ".pytest_cache", ".mypy_cache",
                                    ".ruff_cache")
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


def run_one(tree: Path, m: Mutant) -> tuple[str, float]:
    target = tree / m.path
    original = mutated = target.read_text(encoding="utf-8")
    for old, new in m.edits:
        if mutated.count(old) != 1:
            return "stale (snippet not found once)", 0.0
        mutated = mutated.replace(old, new)
    target.write_text(mutated, encoding="utf-8")
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests],
                              cwd=tree, capture_output=True, text=True, timeout=900)
    finally:
        target.write_text(original, encoding="utf-8")
    seconds = time.monotonic() - started
    if proc.returncode == 1:
        return "caught", seconds
    if proc.returncode == 0:
        return "MISSED", seconds
    return f"error (pytest exit {proc.returncode}): {proc.stdout[-300:]}", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutant names (default: all)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    results: list[tuple[Mutant, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        for m in chosen:
            outcome, seconds = run_one(tree, m)
            results.append((m, outcome, seconds))
            print(f"{m.name:<4} {outcome:<8} {seconds:6.1f} s  {m.what}", flush=True)
    caught = sum(1 for _, outcome, _ in results if outcome == "caught")
    print("\n| mutant | guard broken | outcome |\n|---|---|---|")
    for m, outcome, _ in results:
        print(f"| {m.name} | {m.what} | {outcome} |")
    print(f"\n{caught} caught, {len(results) - caught} not caught")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
