"""Let these tests run without installing the example: its src/ goes on the path if needed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("mmaplug_hopper_tiles") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
