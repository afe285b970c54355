import os, sys, shutil
sys.path.insert(0, sys.argv[1])
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.storage.bundle import Manifest
files={f"inductor/d{i%300}/f{i}.py": f"/tmp/work/smsrc/d{i%300}/f{i}.py" for i in range(3000)}
W=sys.argv[2]+"-save"; shutil.rmtree(W, ignore_errors=True)
LocalStore(W).write(Manifest.new("small",{},"f"*12,"w"), files)
