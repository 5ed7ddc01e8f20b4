"""`python -m sandbox doc|sheet …`: make, edit and share emulator documents as a person would, print their links.

The link `doc new` prints is what a person pastes into `python -m sandbox say`; the bot reads the document
through the emulator's docx/wiki/sheets/drive APIs (sandbox/documents/api.py).
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import requests

from sandbox.cli.wire import ControlError, Emulator, emulator_settings

SHARES = {"tenant": "tenant_readable", "tenant-edit": "tenant_editable", "anyone": "anyone_readable",
          "closed": "closed"}
_LINK = re.compile(r"/(?:docx|sheets|wiki|file)/([A-Za-z0-9]+)")


def token_of(link_or_token: str) -> str:
    """A document's token from its web link (…/docx/<token>, /sheets/, /wiki/, /file/) or the token itself."""
    found = _LINK.search(link_or_token)
    return found.group(1) if found else link_or_token.strip()


def _emulator(command: str) -> Emulator | None:
    settings = emulator_settings(command)
    return None if settings is None else Emulator(settings.feishu_domain)


def _call(command: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """POST to the emulator's control API; prints why and answers None when it cannot."""
    emu = _emulator(command)
    if emu is None:
        return None
    try:
        return dict(emu.post(path, body))
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot {command} (is `python -m sandbox serve` running?): {exc}")
        return None


def _access(args: argparse.Namespace) -> dict[str, Any]:
    members = [["openid", m, "view"] for m in args.member or []]
    return {"link_share": SHARES[args.share], "members": members, "app_access": not args.no_app}


def doc_new(args: argparse.Namespace) -> int:
    made = _call("doc new", "docs", {"title": args.title, "markdown": args.body.replace("\\n", "\n"),
                                     **_access(args)})
    if made is None:
        return 1
    print(made["link"])
    return 0


def doc_edit(args: argparse.Namespace) -> int:
    done = _call("doc edit", "docs/edit", {"token": token_of(args.doc), "markdown": args.body.replace("\\n", "\n")})
    if done is None:
        return 1
    print(f"revision {done['revision']}")
    return 0


def doc_share(args: argparse.Namespace) -> int:
    done = _call("doc share", "docs/access", {"token": token_of(args.doc), "link_share": SHARES[args.who]})
    if done is None:
        return 1
    print(f"{done['link']}: link share {done['link_share']}")
    return 0


def doc_member(args: argparse.Namespace) -> int:
    emu = _emulator("doc member")
    if emu is None:
        return 1
    token = token_of(args.doc)
    try:
        members = [m for m in emu.get("docs", token=token)["members"] if m[1] != args.open_id]
        done = emu.post("docs/access", {"token": token, "members": [*members, ["openid", args.open_id, args.perm]]})
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot add the member: {exc}")
        return 1
    print(f"{done['link']}: members {', '.join(f'{m[1]} ({m[2]})' for m in done['members'])}")
    return 0


def doc_app(args: argparse.Namespace) -> int:
    done = _call("doc app", "docs/access", {"token": token_of(args.doc), "app_access": args.state == "on"})
    if done is None:
        return 1
    print(f"{done['link']}: the app {'may' if done['app_access'] else 'may not'} read it")
    return 0


def doc_wiki(args: argparse.Namespace) -> int:
    done = _call("doc wiki", "wiki", {"obj_token": token_of(args.doc), "obj_type": args.type})
    if done is None:
        return 1
    print(done["link"])
    return 0


def sheet_new(args: argparse.Namespace) -> int:
    rows = [[cell.strip() for cell in row.split(",")] for row in args.rows]
    made = _call("sheet new", "sheets", {"title": args.title, "sheets": {args.sheet: rows}, **_access(args)})
    if made is None:
        return 1
    print(made["link"])
    return 0


def _with_access(p: argparse.ArgumentParser) -> None:
    p.add_argument("--share", choices=sorted(SHARES), default="tenant", help="who the link lets in (tenant)")
    p.add_argument("--member", action="append", help="an open_id to add as a reader (repeatable)")
    p.add_argument("--no-app", action="store_true", help="do not add the app: its reads fail as in Feishu")


def add_commands(sub: Any) -> None:
    """Register `doc new|edit|share|member|app|wiki` and `sheet new` on the `python -m sandbox` parser."""
    docs = sub.add_parser("doc", help="make, edit and share emulator documents (docx)").add_subparsers(
        dest="action", required=True)
    p = docs.add_parser("new", help="a docx from simple Markdown (\\n for new lines); prints its link")
    p.add_argument("title")
    p.add_argument("body", help="Markdown: # headings, - bullets, 1. lists, ``` code, > quotes, | tables |")
    _with_access(p)
    p.set_defaults(func=doc_new)
    p = docs.add_parser("edit", help="replace a document's body; prints the new revision")
    p.add_argument("doc", help="link or token")
    p.add_argument("body")
    p.set_defaults(func=doc_edit)
    p = docs.add_parser("share", help="set who the link lets in")
    p.add_argument("doc", help="link or token")
    p.add_argument("who", choices=sorted(SHARES))
    p.set_defaults(func=doc_share)
    p = docs.add_parser("member", help="add a person as a collaborator")
    p.add_argument("doc", help="link or token")
    p.add_argument("open_id")
    p.add_argument("--perm", choices=("view", "edit", "full_access"), default="view")
    p.set_defaults(func=doc_member)
    p = docs.add_parser("app", help="add (on) or remove (off) the app's own access")
    p.add_argument("doc", help="link or token")
    p.add_argument("state", choices=("on", "off"))
    p.set_defaults(func=doc_app)
    p = docs.add_parser("wiki", help="mount a document in the wiki; prints the wiki link")
    p.add_argument("doc", help="link or token")
    p.add_argument("--type", default="docx", choices=("docx", "sheet", "file"))
    p.set_defaults(func=doc_wiki)
    sheets = sub.add_parser("sheet", help="make emulator spreadsheets").add_subparsers(dest="action", required=True)
    p = sheets.add_parser("new", help="a spreadsheet with one sheet; each row is \"a,b,c\"; prints its link")
    p.add_argument("title")
    p.add_argument("rows", nargs="+")
    p.add_argument("--sheet", default="Sheet1", help="the sheet's title")
    _with_access(p)
    p.set_defaults(func=sheet_new)
