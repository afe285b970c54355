"""The kernel machinery: the warm-restart kernel (provisioner, launcher, spare process), the prewarm thread, a
kernel's shutdown, and a runner of cells in real kernels. No session: the session uses these."""
