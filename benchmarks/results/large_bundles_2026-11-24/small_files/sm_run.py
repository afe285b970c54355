import os, sys, shutil
sys.path.insert(0, sys.argv[1])
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.storage.bundle import extract
a=LocalStore(sys.argv[2]); [m]=a.versions("small")
out=sys.argv[2]+"-cache"; shutil.rmtree(out, ignore_errors=True)
with a.open_payload(m) as f: extract(f, m, {"inductor": out})
