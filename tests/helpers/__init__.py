"""What the tests share: real kernels (kernels.py), real redis-servers (redis_server.py), bundles made without
compiling (store.py), a TCP proxy that stalls (tcp_proxy.py) and the model zoo (zoo_models.py)."""
