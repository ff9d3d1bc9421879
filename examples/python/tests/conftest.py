import os
import sys

# Make the package importable without installing it (tests run from the repo
# root as `python3 -m pytest examples/python/tests`).
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PKG_DIR not in sys.path:
    sys.path.insert(0, PKG_DIR)
