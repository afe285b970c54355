"""Saving and restoring a bundle of many small files (3,000 files of 1-13 KB, as a max-autotune bundle holds), one
step per process, with the package found at CODE: so two versions of the code can be timed against each other in
paired runs, for example with a worktree of the commit before at /tmp/before:

  python -m benchmarks many_small_files prep /tmp/before /tmp/store-before
  python -m benchmarks many_small_files prep . /tmp/store-now
  farm-bench -n 8 --vs "python -m benchmarks many_small_files restore /tmp/before /tmp/store-before" \\
      -- python -m benchmarks many_small_files restore . /tmp/store-now
  (and the same with `save`)
"""

from __future__ import annotations

import os
import random
import shutil
import sys

from benchmarks.harness import Job, option

SOURCE = "/tmp/many-small-files"
FILES = {f"inductor/d{i % 300}/f{i}.py": f"{SOURCE}/d{i % 300}/f{i}.py" for i in range(3000)}


OPTIONS = [
    option("step", choices=("prep", "save", "restore")),
    option("code", help="the checkout whose package is timed"),
    option("store_dir", help="the local store it writes or restores"),
]


def run(job: Job) -> None:
    step, code, store_dir = job.args.step, job.args.code, job.args.store_dir
    sys.path.insert(0, os.path.abspath(code))
    from jupyter_compile_cache.storage.bundle import Manifest, extract
    from jupyter_compile_cache.storage.store import LocalStore

    if step == "prep":
        if not os.path.exists(SOURCE):
            rng = random.Random(0)
            for path in FILES.values():
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(rng.randbytes(rng.randint(1000, 13000)))
        shutil.rmtree(store_dir, ignore_errors=True)
        LocalStore(store_dir).write(Manifest.new("small", {}, "f" * 12, "bench"), FILES)
    elif step == "save":
        target = store_dir + "-save"
        shutil.rmtree(target, ignore_errors=True)
        LocalStore(target).write(Manifest.new("small", {}, "f" * 12, "bench"), FILES)
    elif step == "restore":
        store = LocalStore(store_dir)
        [manifest] = store.versions("small")
        cache = store_dir + "-cache"
        shutil.rmtree(cache, ignore_errors=True)
        with store.open_payload(manifest) as payload:
            extract(payload, manifest, {"inductor": cache})
