"""The packaged catalogs' JSON cache returns exactly what parsing the TOML returns, and never
a stale or broken copy."""

from __future__ import annotations

import json

import pytest

from trainperf.specs.catalog_cache import cache_dir, read_catalog
from trainperf.specs.datafiles import read_package_toml


@pytest.mark.parametrize(("package", "name"), [
    ("trainperf.specs", "devices.toml"), ("trainperf.specs", "models.toml"),
    ("trainperf.predict", "efficiency.toml"),
    *(("trainperf.predict", f"stacks/{s}.toml") for s in ("generic", "megatron-core", "torchtitan", "maxtext")),
])
def test_cached_catalog_equals_the_parsed_toml(tmp_path, monkeypatch, package, name):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    parsed = read_package_toml(package, name, "catalog")
    first = read_catalog(package, name, "catalog")  # parses and writes the cache
    flat = name.replace("/", ".")  # a sub-directory of data/ is part of the file name
    files = list(cache_dir().glob(f"{package}.{flat}.*.json"))
    assert len(files) == 1 and first == parsed
    second = read_catalog(package, name, "catalog")  # from the cache
    assert second == parsed
    # same types as tomllib gives (ints stay ints, floats floats)
    assert json.dumps(second, sort_keys=True) == json.dumps(parsed, sort_keys=True)


def test_a_cache_file_that_is_not_the_catalog_is_never_served(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    parsed = read_package_toml("trainperf.specs", "models.toml", "catalog")
    read_catalog("trainperf.specs", "models.toml", "catalog")
    (path,) = cache_dir().glob("trainperf.specs.models.toml.*.json")
    path.write_text("{ not json", encoding="utf-8")
    assert read_catalog("trainperf.specs", "models.toml", "catalog") == parsed  # corrupt: parsed again
    assert json.loads(path.read_text(encoding="utf-8"))["catalog"] == parsed  # and rewritten
    path.write_text("[1, 2]", encoding="utf-8")
    assert read_catalog("trainperf.specs", "models.toml", "catalog") == parsed


def test_edited_catalog_is_parsed_afresh_and_only_the_newest_copies_kept(tmp_path, monkeypatch):
    import sys
    import types

    pkg_dir = tmp_path / "pkg"
    (pkg_dir / "data").mkdir(parents=True)
    (pkg_dir / "__init__.py").write_text("")
    (pkg_dir / "data" / "c.toml").write_text("a = 1\n")
    module = types.ModuleType("tp_cache_probe")
    module.__file__ = str(pkg_dir / "__init__.py")
    monkeypatch.setitem(sys.modules, "tp_cache_probe", module)
    monkeypatch.setattr("importlib.resources.files", lambda package: pkg_dir)
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert read_catalog("tp_cache_probe", "c.toml", "probe") == {"a": 1}
    (pkg_dir / "data" / "c.toml").write_text("a = 2.5\nb = 'x'\n")
    assert read_catalog("tp_cache_probe", "c.toml", "probe") == {"a": 2.5, "b": "x"}
    assert read_catalog("tp_cache_probe", "c.toml", "probe") == {"a": 2.5, "b": "x"}
    assert len(list(cache_dir().glob("tp_cache_probe.c.toml.*.json"))) == 2  # both contents kept
    for i in range(6):
        (pkg_dir / "data" / "c.toml").write_text(f"a = {i}\n")
        assert read_catalog("tp_cache_probe", "c.toml", "probe") == {"a": i}
    assert len(list(cache_dir().glob("tp_cache_probe.c.toml.*.json"))) == 4  # the newest four


def test_cache_directory_that_is_a_file_only_costs_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(blocker))
    assert read_catalog("trainperf.specs", "models.toml", "catalog") == \
        read_package_toml("trainperf.specs", "models.toml", "catalog")


def test_a_cache_that_fails_validation_is_ignored_rebuilt_and_said_once(tmp_path, monkeypatch, capsys):
    """Issue 30: a cache file holding ``{}`` was trusted, and every preset became unknown."""
    from trainperf.specs.presets import get_model

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    parsed = read_package_toml("trainperf.specs", "models.toml", "catalog")
    read_catalog("trainperf.specs", "models.toml", "catalog")
    (path,) = cache_dir().glob("trainperf.specs.models.toml.*.json")
    for bad in ("{}", json.dumps({"format": 2, "sha256": "0" * 64, "catalog": {}}), '{"a": [[[[', "\0" * 100):
        path.write_text(bad, encoding="utf-8")
        capsys.readouterr()
        assert read_catalog("trainperf.specs", "models.toml", "catalog") == parsed
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "ignored and rebuilt" in err and str(path) in err
        assert read_catalog("trainperf.specs", "models.toml", "catalog") == parsed
        assert capsys.readouterr().err == ""  # rebuilt: said once
    assert get_model("llama3-8b").layers == 32


def test_the_cache_is_never_written_through_a_link(tmp_path, monkeypatch):
    """Issue 30: a link planted at the old ``.NAME.PID.tmp`` name, or at the cache's own name,
    must not lead the write to another file."""
    import os

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    victim = tmp_path / "victim"
    victim.write_text("precious")
    parsed = read_package_toml("trainperf.specs", "models.toml", "catalog")
    read_catalog("trainperf.specs", "models.toml", "catalog")
    (path,) = cache_dir().glob("trainperf.specs.models.toml.*.json")
    path.unlink()
    (path.parent / f".{path.name}.{os.getpid()}.tmp").symlink_to(victim)
    path.symlink_to(victim)
    assert read_catalog("trainperf.specs", "models.toml", "catalog") == parsed
    assert victim.read_text() == "precious"
    assert path.is_file() and not path.is_symlink()
    assert json.loads(path.read_text())["catalog"] == parsed
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
