"""Storage: bundles, the local store, the hub over its backends (Redis, object stores, a folder, https), and the
search over both; no torch, no session."""
