"""Links to what an item can watch, read from text: GitHub pull requests, issues and Actions runs; GitLab merge
requests, issues and pipelines. Pure.

A watched thread is data — (provider, repo, kind, number) — never a URL kept as given: the same pull request linked
as `/pull/12`, `/pull/12/files` or `/pull/12#issuecomment-1` is one thread. Repository paths are compared
lower-cased (both platforms treat them case-insensitively).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

GITHUB, GITLAB = "github", "gitlab"
PR, ISSUE, RUN, MR, PIPELINE = "pr", "issue", "run", "mr", "pipeline"
KINDS = {GITHUB: (PR, ISSUE, RUN), GITLAB: (MR, ISSUE, PIPELINE)}
SHOWN = {PR: "PR", ISSUE: "Issue", RUN: "Actions run", MR: "MR", PIPELINE: "Pipeline"}
MOST_PER_TEXT = 10

_URL = re.compile(r"https?://[^\s<>\"'()\[\]{}，。、；！？]+", re.IGNORECASE)
_GITHUB_PATH = re.compile(r"^/([\w.-]+)/([\w.-]+)/(pull|issues|actions/runs)/(\d{1,12})(?:[/?#]|$)")
_GITLAB_PATH = re.compile(r"^/((?:[\w.-]+/)+[\w.-]+)/-/(merge_requests|issues|pipelines)/(\d{1,12})(?:[/?#]|$)")
_GITHUB_KIND = {"pull": PR, "issues": ISSUE, "actions/runs": RUN}
_GITLAB_KIND = {"merge_requests": MR, "issues": ISSUE, "pipelines": PIPELINE}


@dataclass(frozen=True)
class Thread:
    """One watchable thing on a code platform."""

    provider: str
    repo: str  # owner/name (GitHub), group/…/project (GitLab), lower-cased
    kind: str
    number: int  # the PR/MR/issue number (iid on GitLab), or the run's / pipeline's id

    @property
    def key(self) -> str:
        """A short stable id for Redis keys (repository paths can be long and hold any path character)."""
        raw = f"{self.provider}|{self.repo}|{self.kind}|{self.number}"
        return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:20]

    @property
    def shown(self) -> str:
        """`owner/repo#12` (a PR or issue), `group/project!3` (an MR), `… run 123` / `… pipeline 31`."""
        if self.kind in (PR, ISSUE):
            return f"{self.repo}#{self.number}"
        if self.kind == MR:
            return f"{self.repo}!{self.number}"
        return f"{self.repo} {SHOWN[self.kind].lower()} {self.number}"

    def aliases(self) -> list[Thread]:
        """The threads one event may be filed under: GitHub's issues and pull requests share one number space, so a
        pull request linked as `/issues/12` is the same thread (GitHub redirects it)."""
        if self.provider == GITHUB and self.kind in (PR, ISSUE):
            return [self, Thread(self.provider, self.repo, ISSUE if self.kind == PR else PR, self.number)]
        return [self]


def repo_of(path: str) -> str:
    return path.strip("/").lower()


def parse(url: str, github_hosts: Sequence[str] = ("github.com",)) -> Thread | None:
    """The thread one URL names, or None. GitHub links only on `github_hosts`; GitLab links on any host (the
    `/-/` in their path tells them apart; the repository is matched against the payload's project path)."""
    m = re.match(r"^https?://([^/\s:]+)(?::\d+)?(/[^\s]*)$", url.strip(), re.IGNORECASE)
    if not m:
        return None
    host, path = m.group(1).lower(), m.group(2)
    if host in {h.lower() for h in github_hosts}:
        g = _GITHUB_PATH.match(path)
        if g:
            return Thread(GITHUB, repo_of(f"{g.group(1)}/{g.group(2)}"), _GITHUB_KIND[g.group(3)], int(g.group(4)))
        return None
    lab = _GITLAB_PATH.match(path)
    if lab:
        return Thread(GITLAB, repo_of(lab.group(1)), _GITLAB_KIND[lab.group(2)], int(lab.group(3)))
    return None


def find(text: str, github_hosts: Sequence[str] = ("github.com",)) -> list[Thread]:
    """Every thread the text links, in order, each once, at most MOST_PER_TEXT."""
    found: list[Thread] = []
    for m in _URL.finditer(text or ""):
        t = parse(m.group(0).rstrip(".,;:!?)"), github_hosts)
        if t is not None and t not in found:
            found.append(t)
        if len(found) >= MOST_PER_TEXT:
            break
    return found
