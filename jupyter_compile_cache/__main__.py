from .frontends.cli import run

raise SystemExit(run())
