"""Where a kernel loaded from the FX graph cache looks for its tuned config: this cache dir, not the one it was
compiled in (the whole fix runs on a GPU: tests/end_to_end/test_kernel_restore.py with JCC_TEST_DEVICE=cuda)."""

from __future__ import annotations

from jupyter_compile_cache.torch_adapter.kernel_load_fixes import in_this_cache_dir


def test_a_source_path_of_another_cache_dir_moves_into_this_one(tmp_path):
    here = tmp_path / "here"
    (here / "ab").mkdir(parents=True)
    compiled_in = str(tmp_path / "gone" / "ab" / "cabcdef.py")
    assert in_this_cache_dir(compiled_in, str(here)) == str(here / "ab" / "cabcdef.py")


def test_a_path_stays_where_this_cache_dir_has_no_such_dir_or_it_is_already_here(tmp_path):
    here = tmp_path / "here"
    (here / "ab").mkdir(parents=True)
    elsewhere = str(tmp_path / "gone" / "cd" / "ccdef.py")
    assert in_this_cache_dir(elsewhere, str(here)) == elsewhere  # nothing restored for it here
    already = str(here / "ab" / "cabcdef.py")
    assert in_this_cache_dir(already, str(here) + "/") == already
    not_a_kernel_shard = str(tmp_path / "gone" / "triton" / "k.py")
    assert in_this_cache_dir(not_a_kernel_shard, str(here)) == not_a_kernel_shard
    assert in_this_cache_dir(None, str(here)) is None
