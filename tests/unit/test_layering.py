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
    # every module file under remote/, store/ and sandbox/
    for package in ("remote", "store", "sandbox"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if module.endswith("__init__"):
                module = module.rsplit(".", 1)[0]
            code += f"\nimport {module}"
    loaded = _modules_after_import(code)
    # Rich may arrive through httpx's optional CLI (httpx imports it when installed); Textual and
    # our console package must never load.
    assert not {m for m in loaded if m.split(".")[0] in ("textual", "console")}


#: package -> import prefixes its sources must never name (the same rules as pyproject's import-linter
#: contracts, checked here too so that a plain pytest run catches a wrong import).
FORBIDDEN = {
    "remote": ("console", "store", "sandbox", "textual", "rich"),
    "store": ("console", "sandbox", "textual", "rich", "remote.tpu", "remote.ssh", "remote.container",
              "remote.vllm_log", "remote.bench"),
    "sandbox": ("console", "store", "textual", "rich", "remote.tpu", "remote.ssh", "remote.container",
                "remote.vllm_log", "remote.bench", "remote.secrets"),
}


def _imports(path: Path) -> list[str]:
    import ast

    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_sources_import_only_in_the_allowed_direction() -> None:
    offenders = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in _imports(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_the_direction_check_sees_a_wrong_import(tmp_path: Path) -> None:
    """The rule above is not vacuous: a remote module importing the store is caught."""
    bad = tmp_path / "lint.py"
    bad.write_text("from store.records import Launch\n", encoding="utf-8")
    assert any(name.startswith(FORBIDDEN["remote"][1]) for name in _imports(bad))


def test_remote_init_is_light() -> None:
    loaded = _modules_after_import("import remote")
    heavy = {"asyncssh", "httpx", "google.cloud.tpu_v2", "sqlite_utils"}
    assert not heavy & loaded
