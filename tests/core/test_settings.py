"""settings.py's own rules for what it reads from the environment (yes/no), property-based; sizes are tested in
test_units.py and hub URLs in storage/backends/test_url.py and namespaces in storage/test_namespace.py."""

from __future__ import annotations

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
    from jupyter_compile_cache.core.settings import ENV, CompileCache

    traits = CompileCache.class_traits(config=True)
    assert set(traits) == set(ENV)
    for name, trait in traits.items():
        assert f"${ENV[name]}" in trait.help, name
