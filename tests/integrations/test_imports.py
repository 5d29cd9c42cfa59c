"""The integrations are optional: ``import selfcal`` and its core packages never import
torchmetrics, Lightning or Ray, and importing an integration without its dependency is an
``ImportError`` that names the ``lightning`` extra. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torchmetrics", "lightning", "pytorch_lightning", "lightning_fabric", "ray")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_selfcal_imports_none_of_the_optional_frameworks():
    code = f"""
import json, sys
import selfcal, selfcal.metrics, selfcal.posthoc, selfcal.training, selfcal.integrations
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_a_missing_dependency_names_the_extra():
    """``sys.modules[name] = None`` makes ``import name`` fail as if it were not installed."""
    code = """
import json, sys
for name in ("torchmetrics", "lightning", "lightning.pytorch"):
    sys.modules[name] = None
messages = {}
for module in ("selfcal.integrations.torchmetrics", "selfcal.integrations.lightning"):
    try:
        __import__(module)
    except ImportError as error:
        messages[module] = str(error)
print(json.dumps(messages))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    messages = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(messages) == {"selfcal.integrations.torchmetrics", "selfcal.integrations.lightning"}
    for module, message in messages.items():
        assert 'pip install "selfcal[lightning]"' in message, message
        assert module in message


def test_lightning_missing_alone_names_the_extra():
    """With torchmetrics installed but Lightning missing, the callback module says so."""
    code = """
import sys
sys.modules["lightning"] = None
sys.modules["lightning.pytorch"] = None
import selfcal.integrations.torchmetrics
try:
    import selfcal.integrations.lightning
except ImportError as error:
    print(error)
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    message = result.stdout.strip().splitlines()[-1]
    assert "selfcal.integrations.lightning needs lightning" in message
    assert 'pip install "selfcal[lightning]"' in message
