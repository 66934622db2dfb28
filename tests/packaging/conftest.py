"""The wheel as users get it: built once per session by ``python -m build`` from a clean copy of the
working tree (tracked and new files, nothing git ignores), so no stale ``build/`` folder of an
earlier build can add files to it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def source_files() -> list[str]:
    """The repository's files as a fresh clone plus the uncommitted new ones would have them."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return sorted(name for name in out.split("\0") if name and (ROOT / name).is_file())


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    src, dist = base / "src", base / "dist"
    for name in source_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = dist.glob("queuecore-*.whl")
    return built
