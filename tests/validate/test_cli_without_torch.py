"""Without torch, the torch-backed commands say so in one line and exit 2 (no traceback)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# sys.modules["torch"] = None makes every `import torch` raise ImportError, as on a machine without it.
NO_TORCH = "import sys; sys.modules['torch'] = None; from calc.cli.app import main; sys.argv = {argv!r}; main()"


@pytest.mark.parametrize("args", [["profile", "--quick", "--out", "{tmp}/p"],
                                  ["validate", "--quick", "--out", "{tmp}/v"],
                                  ["validate-comm", "--quick", "--out", "{tmp}/c"]])
def test_without_torch_is_one_line_exit_2(args, tmp_path):
    argv = ["roofline", *(a.format(tmp=tmp_path) for a in args)]
    r = subprocess.run([sys.executable, "-c", NO_TORCH.format(argv=argv)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"roofline: error: {args[0]}: needs torch, which is not installed: "
                                             "pip install 'roofline[torch]'"]
    assert not any((tmp_path / d).exists() for d in "pvc")
