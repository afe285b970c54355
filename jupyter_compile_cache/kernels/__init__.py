"""The kernel machinery: the warm kernel (its launcher, the templates kernels are forked from, a kernel's side of
a launch and how it started), the prewarm thread, a kernel's shutdown, and a runner of cells in real kernels. No
session: the session uses these."""
