"""The wheel ships the library only (the core, the dashboard app, the CLI) under names no Django site
uses for its own packages, with the core depending on redis alone and the rest in extras."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

from tests.packaging.conftest import ROOT, source_files

INSTALLED_AS = {"queuecore": "queuecore", "dashboard": "queuecore_dashboard", "adminctl": "queuecore_adminctl"}


def shipped(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {name for name in zf.namelist() if ".dist-info/" not in name}


def metadata(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (path,) = [n for n in zf.namelist() if n.endswith(f".dist-info/{name}")]
        return zf.read(path).decode()


def test_the_wheel_holds_the_three_packages_and_nothing_of_the_bundled_site(wheel: Path) -> None:
    assert {name.split("/")[0] for name in shipped(wheel)} == {"queuecore", "queuecore_dashboard",
                                                                 "queuecore_adminctl"}


def test_every_file_of_the_three_folders_ships_under_its_installed_name(wheel: Path) -> None:
    expected = set()
    for name in source_files():
        folder, _, rest = name.partition("/")
        if folder in INSTALLED_AS:
            expected.add(f"{INSTALLED_AS[folder]}/{rest}")
    assert shipped(wheel) == expected  # every subpackage listed in pyproject.toml, every template and script
    assert {"queuecore/py.typed", "queuecore_dashboard/py.typed", "queuecore_adminctl/py.typed",
            "queuecore/core/lua/enqueue.lua", "queuecore_dashboard/templates/queuecore_dashboard/base.html",
            "queuecore_dashboard/static/queuecore_dashboard/css/dashboard.css",
            "queuecore_dashboard/migrations/0001_initial.py"} <= expected


def test_the_core_needs_redis_alone_and_the_rest_comes_with_extras(wheel: Path) -> None:
    meta = Parser().parsestr(metadata(wheel, "METADATA"))
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    assert [r.name for r in requirements if r.marker is None] == ["redis"]

    def extra(name: str) -> set[str]:
        return {r.name for r in requirements if r.marker is not None and r.marker.evaluate({"extra": name})}

    assert {"django", "dashboard", "cli", "fast", "all"} <= set(meta.get_all("Provides-Extra"))
    assert extra("django") == {"django"}
    assert extra("dashboard") == {"django", "django-htmx"}
    assert extra("cli") == {"click", "rich"}
    assert extra("fast") == {"hiredis", "orjson"}
    assert extra("otel") == {"opentelemetry-api"}
    assert extra("all") == (extra("django") | extra("dashboard") | extra("cli") | extra("fast") | extra("periodic")
                            | extra("otel") | extra("metrics"))
    assert "adminctl = queuecore_adminctl.cli:main" in metadata(wheel, "entry_points.txt")


def test_no_module_is_importable_under_two_names() -> None:
    """The repository's folders are imported only under their installed names, here and in the site."""
    for package in ("queuecore_dashboard", "queuecore_adminctl"):
        root = importlib.import_module(package)
        assert Path(root.__file__).parent.name == {v: k for k, v in INSTALLED_AS.items()}[package]
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            importlib.import_module(module.name)
    assert not [name for name in sys.modules if name.split(".")[0] in ("dashboard", "adminctl")]
    for path in ("config/settings.py", "config/urls.py", "tests/settings.py", "tests/urls.py"):
        text = (ROOT / path).read_text()
        assert '"dashboard' not in text and '"adminctl' not in text, path
