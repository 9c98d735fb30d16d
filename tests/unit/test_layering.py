"""The import direction: remote and store never load Textual or Rich; store never loads console."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after_import(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_remote_and_store_do_not_import_textual_or_rich() -> None:
    code = "\n".join(
        f"import {m}" for m in ("remote", "remote.models", "remote.errors", "store")
    )
    # every module file under remote/ and store/ (the sandbox included)
    for package in ("remote", "store"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if module.endswith("__init__"):
                module = module.rsplit(".", 1)[0]
            code += f"\nimport {module}"
    loaded = _modules_after_import(code)
    # Rich may arrive through httpx's optional CLI (httpx imports it when installed); Textual and
    # our console package must never load.
    assert not {m for m in loaded if m.split(".")[0] in ("textual", "console")}


def test_remote_and_store_sources_never_import_rich_textual_or_console() -> None:
    import ast

    offenders = []
    for package in ("remote", "store"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in ("rich", "textual", "console") or (package == "store" and top == "remote"
                                                                  and name not in ("remote.models", "remote.errors", "remote.secrets")):
                        offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_remote_init_is_light() -> None:
    loaded = _modules_after_import("import remote")
    heavy = {"asyncssh", "httpx", "google.cloud.tpu_v2", "sqlite_utils"}
    assert not heavy & loaded
