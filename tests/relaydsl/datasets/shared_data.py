"""Where the project's shared copy of the datasets is: a `shared/data` folder next to this
checkout or to one of its parents (a worktree sits one level deeper than the main one)."""
from pathlib import Path

SHARED_DATA = next((p / "shared" / "data" for p in Path(__file__).resolve().parents
                    if (p / "shared" / "data").is_dir()), None)
