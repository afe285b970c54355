"""The one place that touches torch's private names, each feature-detected (read in torch 2.9 to 2.15): what a cell
compiled or used, the cache layers and their counters, the environment fingerprint, Dynamo precompile with its
guards and fixes, and compiler.py for the rest."""
