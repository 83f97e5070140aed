"""The README's library example runs as written (on its own embedded PostgreSQL)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_library_example_runs(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env |= {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Likes oolong tea" in done.stdout
    assert "Biscuit" in done.stdout
    assert "Recorded in MEMORY.md" in done.stdout
