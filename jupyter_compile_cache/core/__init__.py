"""The session core: one session per kernel runs the cell flow (session.py); commands.py does the rest for the
front ends; settings, typed records, the hub policy and the per-machine toolchain bundle."""
