"""docs/python.md's complete example, run as written against a real host (its models example
is run by test_models.py, with a bundle to import).

The block is the ```python fence right after the `<!-- tested: … -->` marker; it is copied
byte for byte into a script and run in a fresh interpreter, the host given by TLI_ENDPOINT as
the docs say. So the docs and this test cannot drift apart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

MARKER = "<!-- tested: the python block below is run as written"


def example_from(docs: Path, marker: str = MARKER) -> str:
    text = docs.read_text(encoding="utf-8")
    assert marker in text, f"{docs} lost its tested-example marker {marker!r}"
    after = text.split(marker, 1)[1]
    found = re.search(r"^```python\n(.*?)^```$", after, re.MULTILINE | re.DOTALL)
    assert found, f"no ```python block after the marker in {docs}"
    return found.group(1)


def test_the_docs_example_runs_as_written(docs: Path, endpoint: str, tmp_path: Path) -> None:
    code = example_from(docs)
    assert "tli.start(" in code and "tli.watch(" in code and "savefig(" in code
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, TLI_ENDPOINT=f"http://{endpoint}", MPLBACKEND="Agg")
    env.pop("TLI_TOKEN", None)
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr[-4000:]}"
    assert run.returncode == 0, output
    assert re.search(r"^job \d+: 4 tasks$", run.stdout, re.MULTILINE), output
    assert len(re.findall(r"^task \d+: \w+ -> completed$", run.stdout, re.MULTILINE)) == 4, output
    assert "best validation MSE: task" in run.stdout, output
    assert "valid_skill" in run.stdout, output
    assert "job" in run.stderr and "100.0/100%" in run.stderr, "the tqdm bars: " + output
    png = (tmp_path / "train_loss.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000, len(png)
