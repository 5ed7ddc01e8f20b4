"""core/boot.py: the collector pauses only while `python -m` locates an entry point of ours, and every entry point
starts it again before its work (a long-running process without it would keep every reference cycle)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gc_after_import(argv0: str) -> str:
    code = f"import sys; sys.argv[:1] = [{argv0!r}]; import jobs, bot, sandbox, gc; print(gc.isenabled())"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_collector_pauses_only_while_python_dash_m_locates_the_module() -> None:
    assert gc_after_import("-m") == "False"
    assert gc_after_import("/usr/bin/gunicorn") == "True"  # any other importer: left alone


def main_blocks(path: Path) -> list[ast.If]:
    tree = ast.parse(path.read_text())
    return [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]


def test_every_entry_point_of_a_pausing_package_starts_the_collector_before_its_work() -> None:
    entries = {p: blocks for room in ("jobs", "bot", "sandbox") for p in sorted((ROOT / room).glob("*.py"))
               if (blocks := main_blocks(p))}
    assert {p.name for p in entries} >= {"worker.py", "sweeper.py", "longconn.py", "doctor.py", "__main__.py"}
    for path, blocks in entries.items():
        source = ast.unparse(blocks[0]) + (path.read_text() if path.name == "worker.py" else "")
        assert "boot.started()" in source, f"{path.relative_to(ROOT)}: its __main__ never calls boot.started()"


def test_each_web_worker_starts_the_collector_once_it_has_imported_the_app() -> None:
    import gunicorn.config

    hooks = {node.name: ast.unparse(node) for node in ast.parse((ROOT / "gunicorn.conf.py").read_text()).body
             if isinstance(node, ast.FunctionDef)}
    assert {"post_fork", "post_worker_init"} <= {s.name for s in gunicorn.config.KNOWN_SETTINGS}
    assert "gc.disable()" in hooks["post_fork"] and "boot.started()" in hooks["post_worker_init"]
