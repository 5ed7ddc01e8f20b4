"""Deliveries read into happenings: what occurred to which threads of which repository. Pure.

GitHub (X-GitHub-Event): `check_run`, `check_suite`, `workflow_run` completed → `ci` (failed / passed, with the
commit and the pull requests GitHub matched it to); `pull_request` closed → `merged` or `closed`, opened /
reopened / synchronize / edited / ready_for_review → `head` (the pull request's head moved, nothing to say);
`pull_request_review` submitted with state changes_requested → `changes` (and its body, if any, as a `comment`);
`pull_request_review_comment` and `issue_comment` created → `comment`; `issues` closed → `closed`.
GitLab (X-Gitlab-Event): `Pipeline Hook` failed / success → `ci`; `Merge Request Hook` merge / close → `merged` /
`closed`, open / reopen / update → `head`; `Note Hook` on a merge request or issue → `comment`; `Issue Hook` close →
`closed`. Confidential issues and notes are never read (their hooks are not handled).

Shapes checked against GitHub's docs and octokit/webhooks' payload-examples, and GitLab's "Webhook events" page
(tests/data/codehost/). Every string taken from a payload is text from outside: it is data, cut to size, and cleaned
of what UTF-8 cannot carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from codehost.links import GITHUB, GITLAB, ISSUE, MR, PIPELINE, PR, RUN, Thread, repo_of

CI, HEAD, MERGED, CLOSED, CHANGES, COMMENT = "ci", "head", "merged", "closed", "changes", "comment"
FAILED, PASSED = "failed", "passed"
FAST = (CI, MERGED, CLOSED, CHANGES)  # a card in the topic (no model)
TEXT_CHARS, TITLE_CHARS, NAME_CHARS = 2000, 200, 100

# Event types stored at the door (others: 200, ignored), and the actions among them worth a look.
GITHUB_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "check_run": ("completed",), "check_suite": ("completed",), "workflow_run": ("completed",),
    "pull_request": ("closed", "opened", "reopened", "synchronize", "edited", "ready_for_review"),
    "pull_request_review": ("submitted",), "pull_request_review_comment": ("created",),
    "issue_comment": ("created",), "issues": ("closed",),
}
GITLAB_EVENTS = ("Pipeline Hook", "Merge Request Hook", "Note Hook", "Issue Hook")
GITHUB_FAILED = ("failure", "timed_out", "startup_failure")
GITLAB_STATES = {"failed": FAILED, "success": PASSED}


@dataclass(frozen=True)
class Happening:
    """One thing that happened to one or more threads of a repository."""

    provider: str
    repo: str
    kind: str  # ci | head | merged | closed | changes | comment
    threads: tuple[tuple[str, int], ...]  # (thread kind, number) it is filed under
    sha: str = ""  # ci: the commit it ran on; head: the new head
    state: str = ""  # ci: failed | passed
    name: str = ""  # ci: the check / workflow / pipeline
    who: str = ""  # the login that caused it
    title: str = ""  # the pull request's / issue's title
    url: str = ""
    text: str = ""  # a comment's body (the slow path)
    heads: tuple[tuple[int, str], ...] = field(default=())  # (pull request, its head) a CI payload names
    at: float = 0.0  # when it happened, by the payload (0: unknown)

    def thread_list(self) -> list[Thread]:
        return [Thread(self.provider, self.repo, kind, number) for kind, number in self.threads]

    def to_json(self) -> dict[str, Any]:
        """Its fields as JSON takes them (tuples become lists); shallow, as the door writes one per delivery."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Happening:
        names = cls.__dataclass_fields__
        kept = {k: v for k, v in data.items() if k in names}
        kept["threads"] = tuple((str(k), int(n)) for k, n in kept.get("threads") or ())
        kept["heads"] = tuple((int(n), str(s)) for n, s in kept.get("heads") or ())
        return cls(**kept)


def wanted(provider: str, event: str, payload: Mapping[str, Any]) -> bool:
    """Whether the door stores this delivery (the rest is answered 200 and ignored): a handled event type and, for
    GitHub, one of its actions worth a look."""
    if provider == GITHUB:
        return str(payload.get("action") or "") in GITHUB_ACTIONS.get(event, ())
    return event in GITLAB_EVENTS


def repository(provider: str, payload: Mapping[str, Any]) -> str:
    """The repository a delivery is about (lower-cased), or "" when the payload names none."""
    if provider == GITHUB:
        return repo_of(_s(_o(payload.get("repository")).get("full_name")))
    return repo_of(_s(_o(payload.get("project")).get("path_with_namespace")))


def read(provider: str, event: str, payload: Mapping[str, Any]) -> list[Happening]:
    """The happenings of one delivery ([] when it says nothing we act on)."""
    repo = repository(provider, payload)
    if not repo:
        return []
    if provider == GITHUB:
        return _github(event, repo, payload)
    return _gitlab(event, repo, payload)


# -- GitHub ---------------------------------------------------------------------------------------------------

def _github(event: str, repo: str, p: Mapping[str, Any]) -> list[Happening]:
    action, who = _s(p.get("action")), _s(_o(p.get("sender")).get("login"), NAME_CHARS)
    if action not in GITHUB_ACTIONS.get(event, ()):
        return []
    if event in ("check_run", "check_suite", "workflow_run"):
        return _github_ci(event, repo, p, who)
    if event == "pull_request":
        return _github_pull(repo, action, _o(p.get("pull_request")), who)
    if event == "pull_request_review":
        return _github_review(repo, p)
    if event == "pull_request_review_comment":
        pr, c = _o(p.get("pull_request")), _o(p.get("comment"))
        return [_comment(GITHUB, repo, ((PR, _n(pr.get("number"))),), c, (_o(c.get("user")).get("login"),
                         c.get("body"), pr.get("title"), c.get("created_at")))]
    if event == "issue_comment":
        issue, c = _o(p.get("issue")), _o(p.get("comment"))
        kind = PR if issue.get("pull_request") else ISSUE
        return [_comment(GITHUB, repo, ((kind, _n(issue.get("number"))),), c, (_o(c.get("user")).get("login"),
                         c.get("body"), issue.get("title"), c.get("created_at")))]
    issue = _o(p.get("issue"))  # issues closed
    return [Happening(GITHUB, repo, CLOSED, ((ISSUE, _n(issue.get("number"))),), who=who,
                      title=_s(issue.get("title"), TITLE_CHARS), url=_url(issue.get("html_url")),
                      at=_time(issue.get("closed_at")))]


def _github_ci(event: str, repo: str, p: Mapping[str, Any], who: str) -> list[Happening]:
    run = _o(p.get(event))
    conclusion = _s(run.get("conclusion"))
    state = FAILED if conclusion in GITHUB_FAILED else PASSED if conclusion == "success" else ""
    if not state:  # neutral, skipped, cancelled, stale, action_required: nothing to say
        return []
    prs = [_o(x) for x in run.get("pull_requests") or [] if isinstance(x, dict)]
    threads: list[tuple[str, int]] = [(PR, _n(x.get("number"))) for x in prs if _n(x.get("number"))]
    if event == "workflow_run" and _n(run.get("id")):
        threads.append((RUN, _n(run.get("id"))))
    sha = _s(run.get("head_sha"), 64)
    name = {"check_run": run.get("name"), "check_suite": _o(run.get("app")).get("name"),
            "workflow_run": run.get("name") or _o(p.get("workflow")).get("name")}[event]
    url = _url(run.get("html_url")) or _url(f"{_s(_o(p.get('repository')).get('html_url'))}/commit/{sha}")
    heads = tuple((_n(x.get("number")), _s(_o(x.get("head")).get("sha"), 64)) for x in prs
                  if _n(x.get("number")) and _o(x.get("head")).get("sha"))
    return [Happening(GITHUB, repo, CI, tuple(threads), sha=sha, state=state, name=_s(name, NAME_CHARS) or event,
                      who=who, url=url, heads=heads,
                      at=_time(run.get("completed_at") or run.get("updated_at")))]


def _github_pull(repo: str, action: str, pr: Mapping[str, Any], who: str) -> list[Happening]:
    threads, title, url = ((PR, _n(pr.get("number"))),), _s(pr.get("title"), TITLE_CHARS), _url(pr.get("html_url"))
    if action == "closed":
        merged = bool(pr.get("merged"))
        return [Happening(GITHUB, repo, MERGED if merged else CLOSED, threads, who=who, title=title, url=url,
                          at=_time(pr.get("merged_at") if merged else pr.get("closed_at")))]
    sha = _s(_o(pr.get("head")).get("sha"), 64)
    return [Happening(GITHUB, repo, HEAD, threads, sha=sha, who=who, title=title, url=url,
                      at=_time(pr.get("updated_at")))] if sha else []


def _github_review(repo: str, p: Mapping[str, Any]) -> list[Happening]:
    pr, review = _o(p.get("pull_request")), _o(p.get("review"))
    threads = ((PR, _n(pr.get("number"))),)
    reviewer = _o(review.get("user")).get("login")
    out = []
    if _s(review.get("state")).lower() == "changes_requested":
        out.append(Happening(GITHUB, repo, CHANGES, threads, who=_s(reviewer, NAME_CHARS),
                             title=_s(pr.get("title"), TITLE_CHARS), url=_url(review.get("html_url")),
                             at=_time(review.get("submitted_at"))))
    if _s(review.get("body")).strip():
        out.append(_comment(GITHUB, repo, threads, review, (reviewer, review.get("body"), pr.get("title"),
                            review.get("submitted_at"))))
    return out


# -- GitLab ---------------------------------------------------------------------------------------------------

def _gitlab(event: str, repo: str, p: Mapping[str, Any]) -> list[Happening]:
    attrs, who = _o(p.get("object_attributes")), _s(_o(p.get("user")).get("username"), NAME_CHARS)
    if event == "Pipeline Hook":
        state = GITLAB_STATES.get(_s(attrs.get("status")), "")
        if not state:
            return []
        threads = [(PIPELINE, _n(attrs.get("id")))]
        mr = _o(p.get("merge_request"))
        if _n(mr.get("iid")):
            threads.insert(0, (MR, _n(mr.get("iid"))))
        url = _url(attrs.get("url")) or _url(f"{_s(_o(p.get('project')).get('web_url'))}/-/pipelines/"
                                             f"{_n(attrs.get('id'))}")
        return [Happening(GITLAB, repo, CI, tuple(threads), sha=_s(attrs.get("sha"), 64), state=state,
                          name=_s(attrs.get("name"), NAME_CHARS) or f"pipeline {_n(attrs.get('id'))}", who=who,
                          url=url, at=_time(attrs.get("finished_at") or attrs.get("updated_at")))]
    if event == "Merge Request Hook":
        return _gitlab_mr(repo, attrs, who)
    if event == "Note Hook":
        return _gitlab_note(repo, p, attrs, who)
    if event == "Issue Hook" and _s(attrs.get("action")) == "close":
        return [Happening(GITLAB, repo, CLOSED, ((ISSUE, _n(attrs.get("iid"))),), who=who,
                          title=_s(attrs.get("title"), TITLE_CHARS), url=_url(attrs.get("url")),
                          at=_time(attrs.get("closed_at") or attrs.get("updated_at")))]
    return []


def _gitlab_mr(repo: str, attrs: Mapping[str, Any], who: str) -> list[Happening]:
    action, threads = _s(attrs.get("action")), ((MR, _n(attrs.get("iid"))),)
    title, url, at = _s(attrs.get("title"), TITLE_CHARS), _url(attrs.get("url")), _time(attrs.get("updated_at"))
    if action in ("merge", "close"):
        return [Happening(GITLAB, repo, MERGED if action == "merge" else CLOSED, threads, who=who, title=title,
                          url=url, at=at)]
    sha = _s(_o(attrs.get("last_commit")).get("id"), 64)
    if action in ("open", "reopen", "update") and sha:
        return [Happening(GITLAB, repo, HEAD, threads, sha=sha, who=who, title=title, url=url, at=at)]
    return []


def _gitlab_note(repo: str, p: Mapping[str, Any], attrs: Mapping[str, Any], who: str) -> list[Happening]:
    if attrs.get("system") or _s(p.get("event_type")) == "confidential_note":
        return []
    noteable = _s(attrs.get("noteable_type"))
    target = _o(p.get("merge_request")) if noteable == "MergeRequest" else _o(p.get("issue"))
    kind = MR if noteable == "MergeRequest" else ISSUE if noteable == "Issue" else ""
    if not kind or not _n(target.get("iid")):
        return []
    return [_comment(GITLAB, repo, ((kind, _n(target.get("iid"))),), attrs, (who, attrs.get("note"),
                     target.get("title"), attrs.get("created_at")))]


# -- shared ---------------------------------------------------------------------------------------------------

def _comment(provider: str, repo: str, threads: tuple[tuple[str, int], ...], c: Mapping[str, Any],
             said: tuple[Any, Any, Any, Any]) -> Happening:
    """A comment on `threads`: `said` is (who, body, the thread's title, when), as the payload has them."""
    who, body, title, at = said
    return Happening(provider, repo, COMMENT, threads, who=_s(who, NAME_CHARS), title=_s(title, TITLE_CHARS),
                     url=_url(c.get("html_url") or c.get("url")), text=_s(body, TEXT_CHARS), at=_time(at))


def _o(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _n(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10**12 else 0


def _s(value: Any, limit: int = 500) -> str:
    """A payload string, cut, with anything UTF-8 cannot carry (a lone surrogate escape) replaced."""
    if not isinstance(value, str):
        return ""
    return value[:limit].encode("utf-8", "replace").decode("utf-8")


def _url(value: Any) -> str:
    """An http(s) link as given, or "" (never a `javascript:` or relative one)."""
    url = _s(value, 1000).strip()
    return url if url.startswith(("https://", "http://")) and not any(c in url for c in " \n\r\t<>\"'()") else ""


def _time(value: Any) -> float:
    """ISO 8601 (`2019-05-15T15:20:38Z`) or GitLab's `2016-08-12 15:26:29 UTC` as epoch seconds; 0 if neither."""
    text = _s(value, 40).strip()
    if not text:
        return 0.0
    try:  # GitHub's, the usual case first: strptime is slow and the door reads every delivery
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    try:
        return datetime.strptime(text.replace("UTC", "+0000"), "%Y-%m-%d %H:%M:%S %z").timestamp()
    except ValueError:
        return 0.0


