#!/bin/bash
# usage: matrix.sh TREE LABEL: each case cold, then restored in a fresh process on an empty torch cache dir, with the
# package from TREE; nothing set but HOME, TMPDIR and the cache dirs (the store is HOME's). Prints what each cell said.
here=$(cd "$(dirname "$0")" && pwd); tree=$1; label=$2; base=${TMPDIR:-/tmp}/matrix_$label; rm -rf "$base"; mkdir -p "$base"
run() { # dir script args...
  local d=$1; shift; mkdir -p "$base/$d/tmp"
  HOME=$base/home TMPDIR=$base/$d/tmp TORCHINDUCTOR_CACHE_DIR=$base/$d/tc PYTHONPATH=$tree:$here python "$@" 2>&1 \
    | grep -E "^RESULT|compile_cache: '" | sed "s/^/$label $d: /" | cut -c1-260
}
for m in llama qwen2 mistral gpt2 whisper; do run "$m-cold" "$here/hf_case.py" "$m"; run "$m-restored" "$here/hf_case.py" "$m"; done
run sizes-cold "$here/dtypes_case.py" dtypes float32,float64; run sizes-restored "$here/dtypes_case.py" dtypes float32,float64
