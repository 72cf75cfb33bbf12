"""The README's module index names every module of both packages, so no new file hides from the reader."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    modules = [
        path.relative_to(ROOT).as_posix()
        for package in ("lecture_code", "kernels")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
    ]
    missing = [m for m in modules if f"`{m}`" not in readme]
    assert not missing, f"README.md's module index lacks: {missing}"
