"""run_builds.py: the Triton folders torch's run-time tuning built after a restore, kept beside the bundles on this
machine and installed into an empty cache dir by the next restore (real folders, real copies)."""

from __future__ import annotations

import os

from jupyter_compile_cache.storage.run_builds import RunBuilds, kernel_folder


def _kernel(root, rel: str, size: int = 8) -> dict[str, str]:
    """A Triton cache folder as Triton leaves it: the binary, its metadata and the group file. {member: path}."""
    folder = os.path.join(root, *rel.split("/"))
    os.makedirs(folder)
    out = {}
    for name in ("k.cubin", "k.json", "__grp__k.json"):
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(b"x" * size)
        out[f"inductor/{rel}/{name}"] = path
    return out


def test_a_member_belongs_to_the_triton_folder_it_lies_in():
    assert kernel_folder("inductor/triton/1/HASH/k.cubin") == "inductor/triton/1/HASH"
    assert kernel_folder("triton/HASH/k.cubin") == "triton/HASH"
    assert kernel_folder("inductor/fxgraph/aa/key/0") is None
    assert kernel_folder("inductor/triton/1/loose-file") is None


def test_kept_folders_install_whole_into_an_empty_cache_dir_and_never_over_one_there(tmp_path):
    cache = tmp_path / "cache"
    built = _kernel(cache, "triton/0/AAAA") | _kernel(cache, "triton/1/BBBB")
    graph = {"inductor/fxgraph/aa/key/0": str(cache / "graph")}  # not a kernel: never kept here
    (cache / "graph").write_bytes(b"g")
    builds = RunBuilds(str(tmp_path / "store"))
    assert builds.keep("net", built | graph) == 2
    assert builds.keep("net", built) == 0  # kept already
    assert builds.size("net") == 6 * 8

    empty = tmp_path / "empty"
    written = builds.install("net", {"inductor": str(empty)})
    assert sorted(os.path.relpath(p, empty) for p in written) == sorted(
        os.path.join("triton", device, key, n)
        for device, key in (("0", "AAAA"), ("1", "BBBB"))
        for n in ("k.cubin", "k.json", "__grp__k.json")
    )
    assert (empty / "triton" / "0" / "AAAA" / "k.cubin").read_bytes() == b"x" * 8
    assert not any(n.startswith(".") for n in os.listdir(empty / "triton" / "0"))  # no staging left

    theirs = tmp_path / "theirs"
    (theirs / "triton" / "0" / "AAAA").mkdir(parents=True)
    (theirs / "triton" / "0" / "AAAA" / "k.cubin").write_bytes(b"torch's own")
    written = builds.install("net", {"inductor": str(theirs)})
    assert (theirs / "triton" / "0" / "AAAA" / "k.cubin").read_bytes() == b"torch's own"
    assert {os.path.basename(os.path.dirname(p)) for p in written} == {"BBBB"}
    assert builds.install("other", {"inductor": str(tmp_path / "x")}) == []  # NAME's own only


def test_a_name_keeps_at_most_its_cap_oldest_folders_first_out(tmp_path):
    cache = tmp_path / "cache"
    builds = RunBuilds(str(tmp_path / "store"), max_bytes=2 * 3 * 100)  # two folders of 300 bytes
    for i, name in enumerate(("OLD", "MID", "NEW")):
        assert builds.keep("net", _kernel(cache, f"triton/0/{name}", size=100)) == 1
        kept = tmp_path / "store" / "run_builds" / "net" / "inductor" / "triton" / "0" / name
        os.utime(kept, (1000 + i, 1000 + i))
    left = sorted(os.listdir(tmp_path / "store" / "run_builds" / "net" / "inductor" / "triton" / "0"))
    assert left == ["MID", "NEW"] and builds.size("net") == 600
    assert builds.remove("net", dry_run=True) == 600 and builds.size("net") == 600
    assert builds.remove("net") == 600 and builds.size("net") == 0
