import sys
from pathlib import Path

# tests import the shared oracles as a plain module
sys.path.insert(0, str(Path(__file__).parent))
