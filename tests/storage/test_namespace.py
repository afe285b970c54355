"""The hub's namespace rules (storage/namespace.py), property-based: any text is either taken or refused with a
ValueError that names the rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.storage.namespace import check_namespace

MANY = settings(max_examples=400, deadline=None)


NAMESPACES = ["team/proj", "a//b", "/a", "a/", "{x}", "ok.name-1_2", "a b", "team\n"]


@given(st.text(max_size=140) | st.sampled_from(NAMESPACES))
@MANY
def test_a_namespace_is_taken_only_as_slash_joined_safe_parts(namespace):
    try:
        checked = check_namespace(namespace)
    except ValueError as exc:
        assert "invalid namespace" in str(exc)
        return
    assert checked == namespace and len(namespace) <= 128
    assert not set(namespace) & set("{} \t\n:*?") and "//" not in namespace  # one hash slot, one key shape
    assert not namespace.startswith("/") and not namespace.endswith("/")
