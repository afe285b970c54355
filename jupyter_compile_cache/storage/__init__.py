"""Storage: bundles, the local store, the Redis hub, and `find` over both; no torch, no session."""
