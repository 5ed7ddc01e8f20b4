"""Code-platform webhooks (issue 33), the pure parts: who signed a delivery, which links name what, and what every
handled payload means — each parser on the payload examples GitHub's tooling (octokit/webhooks) and GitLab's docs
publish (tests/data/codehost/README.md), a variant changing only the fields a case names."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from codehost import events, ingress
from codehost.events import CHANGES, CI, CLOSED, COMMENT, FAILED, HEAD, MERGED, PASSED, Happening, read, wanted
from codehost.links import GITHUB, GITLAB, ISSUE, MR, PIPELINE, PR, RUN, Thread, find, parse
from codehost.signature import github_signed, gitlab_signed, sign_github

DATA = Path(__file__).resolve().parent / "data" / "codehost"


def example(provider: str, name: str) -> dict[str, Any]:
    return json.loads((DATA / provider / f"{name}.json").read_text(encoding="utf-8"))


def changed(payload: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy of a published example with only the named fields changed (`check_run__conclusion="failure"`)."""
    out = copy.deepcopy(payload)
    for path, value in paths.items():
        *parents, last = path.split("__")
        node = out
        for p in parents:
            node = node[p]
        node[last] = value
    return out


# -- signatures -----------------------------------------------------------------------------------------------

def test_a_github_signature_is_hmac_sha256_of_the_raw_body() -> None:
    body = (DATA / "github" / "ping.payload.json").read_bytes()
    signed = sign_github("It's a Secret to Everybody", body)
    assert signed.startswith("sha256=") and len(signed) == 7 + 64
    assert github_signed("It's a Secret to Everybody", signed, body)
    # GitHub's docs' own test vector ("Validating webhook deliveries")
    assert sign_github("It's a Secret to Everybody", b"Hello, World!") == \
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


@pytest.mark.parametrize("header, body, secret", [
    (None, b"{}", "s"), ("", b"{}", "s"), ("sha256=" + "0" * 64, b"{}", "s"),
    (sign_github("s", b"{}"), b"{} ", "s"),  # tampered body
    (sign_github("t", b"{}"), b"{}", "s"),  # another secret
    (sign_github("s", b"{}").replace("sha256=", "sha1="), b"{}", "s"),
    (sign_github("", b"{}"), b"{}", ""),  # no secret configured: nothing is authentic
    ("sha256=\u00e9\u00e9", b"{}", "s"),
])
def test_a_missing_wrong_or_tampered_github_signature_is_refused(header: str | None, body: bytes, secret: str) -> None:
    assert not github_signed(secret, header, body)


def test_a_gitlab_token_must_equal_the_configured_one() -> None:
    assert gitlab_signed("tok", "tok")
    assert not gitlab_signed("tok", None) and not gitlab_signed("tok", "tok ") and not gitlab_signed("", "")
    assert gitlab_signed("令牌", "令牌".encode().decode("latin-1"))  # HTTP carries bytes; werkzeug reads latin-1


# -- links ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url, thread", [
    ("https://github.com/Codertocat/Hello-World/pull/2", Thread(GITHUB, "codertocat/hello-world", PR, 2)),
    ("https://github.com/o/r/pull/2/files#diff-1", Thread(GITHUB, "o/r", PR, 2)),
    ("https://github.com/o/r/issues/17", Thread(GITHUB, "o/r", ISSUE, 17)),
    ("https://github.com/octo-org/octo-repo/actions/runs/289782451", Thread(GITHUB, "octo-org/octo-repo", RUN,
                                                                             289782451)),
    ("https://github.com/o/r/actions/runs/7/job/9", Thread(GITHUB, "o/r", RUN, 7)),
    ("https://gitlab.com/gitlab-org/gitlab-test/-/merge_requests/1", Thread(GITLAB, "gitlab-org/gitlab-test", MR, 1)),
    ("https://git.example.com/a/b/c/-/pipelines/31", Thread(GITLAB, "a/b/c", PIPELINE, 31)),
    ("http://example.com/gitlabhq/gitlab-test/-/issues/23#note_1", Thread(GITLAB, "gitlabhq/gitlab-test", ISSUE, 23)),
    ("https://github.com/o/r/pull/two", None), ("https://github.com/o/r", None), ("https://evil.com/o/r/pull/2", None),
    ("javascript:alert(1)//github.com/o/r/pull/2", None), ("https://github.com/o/r/pull/2" + "9" * 20, None),
])
def test_a_link_names_one_thread_or_none(url: str, thread: Thread | None) -> None:
    assert parse(url) == thread


def test_links_in_text_are_found_once_each_in_order() -> None:
    text = ("修复在 https://github.com/o/r/pull/12，CI 见 https://github.com/o/r/actions/runs/5 。"
            "同一个 PR：[PR](https://github.com/o/r/pull/12/files) 还有 https://gitlab.com/g/p/-/merge_requests/3.")
    assert find(text) == [Thread(GITHUB, "o/r", PR, 12), Thread(GITHUB, "o/r", RUN, 5), Thread(GITLAB, "g/p", MR, 3)]
    assert find("https://ghe.corp/o/r/pull/1") == [] and find("https://ghe.corp/o/r/pull/1", ["ghe.corp"]) == [
        Thread(GITHUB, "o/r", PR, 1)]
    assert len(find(" ".join(f"https://github.com/o/r/pull/{n}" for n in range(30)))) == 10


def test_a_github_issue_and_pull_request_of_one_number_are_one_thread() -> None:
    pr = Thread(GITHUB, "o/r", PR, 3)
    assert Thread(GITHUB, "o/r", ISSUE, 3) in pr.aliases() and pr.key != Thread(GITHUB, "o/r", ISSUE, 3).key
    assert Thread(GITLAB, "g/p", MR, 3).aliases() == [Thread(GITLAB, "g/p", MR, 3)]


# -- GitHub payloads (octokit/webhooks' examples) ----------------------------------------------------------------

def test_check_run_completed_success_is_ci_passed_on_its_head_and_pull_request() -> None:
    [h] = read(GITHUB, "check_run", example("github", "check_run.completed.payload"))
    assert (h.kind, h.state, h.repo, h.threads) == (CI, PASSED, "codertocat/hello-world", ((PR, 2),))
    assert h.sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821" and h.name == "Octocoders-linter"
    assert h.heads == ((2, "ec26c3e57ca3a959ca5aad62de7213c562f8c821"),)
    assert h.url == "https://github.com/Codertocat/Hello-World/runs/128620228" and h.who == "Codertocat"
    assert h.at > 0


@pytest.mark.parametrize("conclusion, state", [("failure", FAILED), ("timed_out", FAILED),
                                               ("startup_failure", FAILED), ("success", PASSED),
                                               ("cancelled", None), ("neutral", None), ("skipped", None),
                                               ("action_required", None), (None, None)])
def test_a_check_runs_conclusion_decides_failed_or_passed(conclusion: str | None, state: str | None) -> None:
    payload = changed(example("github", "check_run.completed.payload"), check_run__conclusion=conclusion)
    got = read(GITHUB, "check_run", payload)
    assert [h.state for h in got] == ([state] if state else [])


def test_check_suite_and_workflow_run_completed_failure_are_ci_failed() -> None:
    suite = changed(example("github", "check_suite.completed.payload"), check_suite__conclusion="failure")
    [s] = read(GITHUB, "check_suite", suite)
    assert (s.kind, s.state, s.threads, s.name) == (CI, FAILED, ((PR, 2),), suite["check_suite"]["app"]["name"])
    assert s.url == "https://github.com/Codertocat/Hello-World/commit/ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    run = changed(example("github", "workflow_run.completed.with-pull-requests.payload"),
                  workflow_run__conclusion="failure")
    [w] = read(GITHUB, "workflow_run", run)
    assert (w.kind, w.state, w.repo) == (CI, FAILED, "octo-org/octo-repo")
    assert w.threads == ((PR, 2), (RUN, 289782451)) and w.sha == "3484a3fb816e0859fd6e1cea078d76385ff50625"
    [lone] = read(GITHUB, "workflow_run", example("github", "workflow_run.completed.payload"))
    assert all(kind == RUN for kind, _ in lone.threads)


def test_pull_request_closed_is_merged_or_closed_and_other_actions_move_the_head() -> None:
    closed = example("github", "pull_request.closed.payload")
    [c] = read(GITHUB, "pull_request", closed)
    assert (c.kind, c.threads, c.title) == (CLOSED, ((PR, 2),), "Update the README with new information.")
    [m] = read(GITHUB, "pull_request", changed(closed, pull_request__merged=True))
    assert m.kind == MERGED and m.url == "https://github.com/Codertocat/Hello-World/pull/2"
    for name in ("pull_request.synchronize.payload", "pull_request.opened.payload"):
        payload = example("github", name)
        [h] = read(GITHUB, "pull_request", payload)
        assert (h.kind, h.threads, h.sha) == (HEAD, ((PR, 2),), payload["pull_request"]["head"]["sha"])


def test_a_review_asking_for_changes_names_the_reviewer_and_its_body_goes_to_triage() -> None:
    review = example("github", "pull_request_review.submitted.payload")
    assert read(GITHUB, "pull_request_review", review) == []  # state "commented", no body
    asked = changed(review, review__state="changes_requested", review__body="请把空值处理补上")
    changes, comment = read(GITHUB, "pull_request_review", asked)
    assert (changes.kind, changes.who, changes.threads) == (CHANGES, "Codertocat", ((PR, 2),))
    assert (comment.kind, comment.text) == (COMMENT, "请把空值处理补上")


def test_review_comments_and_issue_comments_are_comments_on_their_thread() -> None:
    [rc] = read(GITHUB, "pull_request_review_comment", example("github", "pull_request_review_comment.created.payload"))
    assert rc.kind == COMMENT and rc.threads == ((PR, 2),) and rc.text and rc.url.startswith("https://github.com/")
    issue_comment = example("github", "issue_comment.created.payload")
    [ic] = read(GITHUB, "issue_comment", issue_comment)
    kind = PR if issue_comment["issue"].get("pull_request") else ISSUE
    assert ic.kind == COMMENT and ic.threads == ((kind, issue_comment["issue"]["number"]),)
    assert ic.text == issue_comment["comment"]["body"] and ic.who == issue_comment["comment"]["user"]["login"]


def test_issues_closed_is_closed_and_opened_is_not_stored() -> None:
    opened = example("github", "issues.opened.payload")
    assert not wanted(GITHUB, "issues", opened) and read(GITHUB, "issues", opened) == []
    [c] = read(GITHUB, "issues", changed(opened, action="closed"))
    assert c.kind == CLOSED and c.threads == ((ISSUE, opened["issue"]["number"]),)


@pytest.mark.parametrize("event, name, stored", [
    ("check_run", "check_run.completed.payload", True), ("check_run", "check_run.created.payload", False),
    ("pull_request", "pull_request.closed.payload", True), ("ping", "ping.payload", False),
    ("workflow_run", "workflow_run.completed.payload", True), ("issues", "issues.opened.payload", False),
    ("star", "ping.payload", False),
])
def test_the_door_stores_handled_events_and_actions_only(event: str, name: str, stored: bool) -> None:
    assert wanted(GITHUB, event, example("github", name)) is stored


# -- GitLab payloads (GitLab's "Webhook events" examples) -------------------------------------------------------

def test_pipeline_hook_failed_and_success_are_ci_on_the_merge_request_and_the_pipeline() -> None:
    success = example("gitlab", "pipeline_hook")
    [ok] = read(GITLAB, "Pipeline Hook", success)
    assert (ok.kind, ok.state, ok.repo) == (CI, PASSED, "gitlab-org/gitlab-test")
    assert ok.threads == ((MR, 1), (PIPELINE, 31)) and ok.sha == "bcbb5ec396a2c0f828686f14fac9b80b780504f2"
    assert ok.url == "http://example.com/gitlab-org/gitlab-test/-/pipelines/31" and ok.who == "root"
    assert ok.at == 1471015589.0  # 2016-08-12 15:26:29 UTC
    [bad] = read(GITLAB, "Pipeline Hook", changed(success, object_attributes__status="failed"))
    assert bad.state == FAILED
    assert read(GITLAB, "Pipeline Hook", changed(success, object_attributes__status="running")) == []


def test_merge_request_hook_merge_close_and_open() -> None:
    mr = example("gitlab", "merge_request_hook")
    [opened] = read(GITLAB, "Merge Request Hook", mr)
    assert (opened.kind, opened.threads, opened.sha) == (HEAD, ((MR, 1),), "da1560886d4f094c3e6c9ef40349f7d38b5d27d7")
    [merged] = read(GITLAB, "Merge Request Hook", changed(mr, object_attributes__action="merge"))
    assert (merged.kind, merged.title, merged.repo) == (MERGED, "MS-Viewport", "gitlabhq/gitlab-test")
    [closed] = read(GITLAB, "Merge Request Hook", changed(mr, object_attributes__action="close"))
    assert closed.kind == CLOSED
    assert read(GITLAB, "Merge Request Hook", changed(mr, object_attributes__action="approved")) == []


def test_note_hook_on_a_merge_request_or_issue_is_a_comment_system_and_confidential_notes_are_not() -> None:
    [on_mr] = read(GITLAB, "Note Hook", example("gitlab", "note_hook.merge_request"))
    assert (on_mr.kind, on_mr.threads, on_mr.text, on_mr.who) == (COMMENT, ((MR, 1),), "This MR needs work.", "root")
    [on_issue] = read(GITLAB, "Note Hook", example("gitlab", "note_hook.issue"))
    assert on_issue.threads == ((ISSUE, 17),) and on_issue.text == "Hello world"
    note = example("gitlab", "note_hook.issue")
    assert read(GITLAB, "Note Hook", changed(note, object_attributes__system=True)) == []
    assert read(GITLAB, "Note Hook", changed(note, event_type="confidential_note")) == []
    assert not wanted(GITLAB, "Confidential Note Hook", note) and not wanted(GITLAB, "Job Hook", note)


def test_issue_hook_close_is_closed() -> None:
    issue = example("gitlab", "issue_hook")
    assert read(GITLAB, "Issue Hook", issue) == []  # action "open"
    [closed] = read(GITLAB, "Issue Hook", changed(issue, object_attributes__action="close"))
    assert (closed.kind, closed.threads) == (CLOSED, ((ISSUE, 23),))


# -- text from outside ------------------------------------------------------------------------------------------

def test_payload_text_is_cut_cleaned_and_its_links_only_http() -> None:
    payload = changed(example("github", "issue_comment.created.payload"),
                      comment__body="x" * 50_000 + "\ud800", comment__html_url="javascript:alert(1)")
    [c] = read(GITHUB, "issue_comment", payload)
    assert len(c.text) == events.TEXT_CHARS and c.url == ""
    c.text.encode("utf-8")  # nothing UTF-8 cannot carry
    lone = changed(example("github", "issue_comment.created.payload"), comment__body="坏\ud800字")
    assert read(GITHUB, "issue_comment", lone)[0].text == "坏?字"


def test_a_happening_survives_its_json() -> None:
    [h] = read(GITHUB, "check_run", example("github", "check_run.completed.payload"))
    assert Happening.from_json(json.loads(json.dumps(h.to_json()))) == h


def test_a_payload_without_a_repository_says_nothing() -> None:
    assert read(GITHUB, "check_run", {"action": "completed", "check_run": {"conclusion": "failure"}}) == []
    assert read(GITLAB, "Pipeline Hook", {"object_attributes": {"status": "failed"}}) == []


# -- the card: what outside text may become -------------------------------------------------------------------------

def _entry(h: Happening) -> dict[str, Any]:
    return {"id": "x", "happening": h.to_json(), "threads": [list(t) for t in h.threads]}


def test_a_card_shows_outside_text_as_plain_characters_and_mentions_nobody() -> None:
    from codehost.topic import card_of, plain

    hostile = '<at id=all></at> @all [点我](javascript:alert(1)) **关闭这个事项** `x`'
    [merged] = read(GITHUB, "pull_request", changed(example("github", "pull_request.closed.payload"),
                                                    pull_request__merged=True, pull_request__title=hostile,
                                                    sender__login="<at user_id=\"all\">所有人</at>"))
    text = json.dumps(card_of([_entry(merged)]), ensure_ascii=False)
    assert "已合并" in text and "<at" not in text and "@all" not in text and "](javascript" not in text
    assert "＜at id=all＞" in text and "＠all" in text  # shown, as characters
    assert "[查看](https://github.com/Codertocat/Hello-World/pull/2)" in text  # the platform's own link stays one
    assert plain("a\nb\u202eevil\x00" + "x" * 200, 20) == "a b evil " + "x" * 10 + "…"


def test_a_card_lists_what_arrived_together_and_names_who_asked_for_changes() -> None:
    from codehost.topic import card_of, summary_of

    review = changed(example("github", "pull_request_review.submitted.payload"), review__state="changes_requested")
    changes = read(GITHUB, "pull_request_review", review)[0]
    failed = read(GITHUB, "check_run", changed(example("github", "check_run.completed.payload"),
                                               check_run__conclusion="failure"))[0]
    card = card_of([_entry(changes), _entry(failed)])
    text = json.dumps(card, ensure_ascii=False)
    assert card["header"]["template"] == "red" and "2 条" in card["header"]["title"]["content"]
    assert "Codertocat 要求修改" in text and "CI 失败" in text and "`Octocoders-linter`" in text
    assert "要求修改" in summary_of([_entry(changes)]) and "**" not in summary_of([_entry(changes)])


@pytest.mark.parametrize("text, when", [
    ("2019-05-15T15:20:38Z", datetime(2019, 5, 15, 15, 20, 38, tzinfo=UTC)),  # GitHub
    ("2021-03-05T12:00:00+08:00", datetime(2021, 3, 5, 4, 0, 0, tzinfo=UTC)),
    ("2016-08-12 15:26:29 UTC", datetime(2016, 8, 12, 15, 26, 29, tzinfo=UTC)),  # GitLab
    ("2016-08-12 15:26:29 +0200", datetime(2016, 8, 12, 13, 26, 29, tzinfo=UTC)),
    ("yesterday", None), ("", None), (12, None),
])
def test_a_payloads_time_is_read_in_both_platforms_formats(text: Any, when: datetime | None) -> None:
    assert events._time(text) == (when.timestamp() if when else 0.0)


@pytest.mark.parametrize("text", [
    '{"a": "\\ud83d"}',  # a lone surrogate escape (an emoji cut in half)
    '{"n": NaN, "m": -Infinity}', '{"f": 1.5e308, "g": 0.1}',
    '{"a": 1, "a": 2}', '{"s": "\\u00e9\\n\\"", "t": [true, false, null]}', "[1]", '"x"', "{", "", "{} x",
    '{"deep": ' + "[" * 5000 + "]" * 5000 + "}", '{"ok": ' + "[" * 100 + "]" * 100 + "}",
])
def test_the_door_reads_a_body_as_the_standard_library_would(text: str) -> None:
    """orjson first, the standard library for what orjson refuses: the same value, or the same 400, as json.loads."""
    try:
        want: Any = json.loads(text)
        want = want if isinstance(want, dict) else ingress.Refused(400, "the body is not a JSON object")
    except RecursionError:
        want = ingress.Refused(400, "the body is nested too deeply")
    except ValueError:
        want = ingress.Refused(400, "the body is not JSON")
    try:
        got: Any = ingress._json(text)
    except ingress.Refused as refused:
        got = refused
    if isinstance(want, ingress.Refused):
        assert isinstance(got, ingress.Refused) and (got.status, got.reason) == (want.status, want.reason)
    else:
        assert json.dumps(got, allow_nan=True) == json.dumps(want, allow_nan=True)


def test_the_one_difference_an_integer_past_64_bits_is_read_as_no_number_either_way() -> None:
    """orjson reads it as a float where json.loads keeps the int; no field the door or its run reads can tell, since
    numbers count only below 10**12 (`events._n`)."""
    big = ingress._json('{"n": 123456789012345678901234567890}')["n"]
    assert big == pytest.approx(123456789012345678901234567890) and events._n(big) == 0
    assert events._n(123456789012345678901234567890) == 0
