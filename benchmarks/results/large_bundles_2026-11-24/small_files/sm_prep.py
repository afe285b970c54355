import os, sys, shutil, random
sys.path.insert(0, sys.argv[1])
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.storage.bundle import Manifest
W=sys.argv[2]
if not os.path.exists("/tmp/work/smsrc"):
    random.seed(0)
    for i in range(3000):
        d=f"/tmp/work/smsrc/d{i%300}"; os.makedirs(d, exist_ok=True)
        open(f"{d}/f{i}.py","wb").write(os.urandom(random.randint(1000, 13000)))
files={f"inductor/d{i%300}/f{i}.py": f"/tmp/work/smsrc/d{i%300}/f{i}.py" for i in range(3000)}
shutil.rmtree(W, ignore_errors=True)
LocalStore(W).write(Manifest.new("small",{},"f"*12,"w"), files)
