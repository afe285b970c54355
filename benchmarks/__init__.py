"""The benchmarks: ours against torch's own caches, side by side. One entry point, run from the repository's root:

    python -m benchmarks                 # each benchmark and what it measures
    python -m benchmarks NAME --help     # its options
    python -m benchmarks NAME [options]

Shared parts: `harness.py` (the arguments, the result file and the tables of every benchmark), `_case.py` (one case
in a fresh process), the test harness's servers and kernels (`tests/helpers`). Results go to `benchmarks/results/`;
docs/results.md names the command of each published figure.
"""
