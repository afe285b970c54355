"""settings.py's own rules for what it reads from the environment (yes/no), property-based; sizes are tested in
test_units.py and hub URLs in storage/backends/test_url.py and namespaces in storage/test_namespace.py."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.core.settings import parse_bool

MANY = settings(max_examples=400, deadline=None)


@given(st.text(max_size=8))
@MANY
def test_yes_or_no_is_one_of_the_words_or_a_clear_error(text):
    try:
        value = parse_bool(text)
    except ValueError as exc:
        assert "not a yes/no value" in str(exc)
        return
    assert value is (text.strip().lower() in ("1", "true", "yes", "on"))


def test_every_settings_help_names_its_environment_variable():
    from jupyter_compile_cache.core.settings import BY_NAME, CompileCache

    traits = CompileCache.class_traits(config=True)
    assert set(traits) == set(BY_NAME)
    for name, trait in traits.items():
        assert f"${BY_NAME[name].variable}" in trait.help, name


def test_the_reference_pages_table_is_the_declarations():
    from pathlib import Path

    from jupyter_compile_cache.core.settings import settings_table

    page = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
    assert settings_table() in page.read_text(), "docs/reference.md: paste settings_table()'s output"


def test_a_variables_value_is_checked_as_a_set_value_is(monkeypatch):
    from jupyter_compile_cache.core.settings import SETTINGS, CompileCache

    for setting in SETTINGS:
        monkeypatch.delenv(setting.variable, raising=False)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB_TIMEOUT", " 3.5 ")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_SECRET", " kept as typed ")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_DIR", "~/bundles")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_MAX_SIZE", "lots")
    settings = CompileCache()
    assert settings.hub_timeout == 3.5 and settings.secret == " kept as typed "
    assert settings.store_dir == os.path.expanduser("~/bundles")
    assert settings.max_size == "20G" and [p.variable for p in settings.env_problems] == [
        "JUPYTER_COMPILE_CACHE_MAX_SIZE"
    ]
    assert (
        settings.origin("hub_timeout") == "$JUPYTER_COMPILE_CACHE_HUB_TIMEOUT" and settings.origin("hub") == "default"
    )
