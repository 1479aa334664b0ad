"""The README's training-loop example runs as written (eager patch, torch.compile, AMP)."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
# The suite also runs from a copy of tests/ against an installed wheel (CI), without the checkout.
pytestmark = pytest.mark.skipif(not os.path.exists(README), reason="needs the source checkout")


def test_training_loop_example_runs(tmp_path):
    text = open(README).read()
    section = text.split("## In a training loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^5 norms replaced$", r.stdout, re.M), r.stdout
    assert re.search(r"^loss \d+\.\d{3}$", r.stdout, re.M), r.stdout
