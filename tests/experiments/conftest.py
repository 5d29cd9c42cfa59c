"""Make the shared helpers (``experiments_helpers``) importable under
``--import-mode=importlib`` -- also in spawned worker processes, which inherit ``sys.path``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
