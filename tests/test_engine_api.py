"""The engine as a program uses it: README's usage example, run through `import engine` alone."""
import re
import subprocess
import sys
from pathlib import Path

import engine
from tests.test_app_server import pytestmark as needs_embedded_model

ROOT = Path(__file__).resolve().parent.parent
pytestmark = needs_embedded_model
SECTION = "## Use the engine from Python"


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(SECTION):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readmes_example_imports_engine_alone_and_runs(tmp_path):
    example = readme_example()
    imports = re.findall(r"^\s*(?:import|from)\s+(\S+)", example, re.M)
    assert imports == ["engine"], imports
    env = {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"MAL \d+\.\d\d, speed-up \d+\.\d\dx", done.stdout), done.stdout
    assert (tmp_path / "heart.png").stat().st_size > 0


def test_the_public_names_are_all_there():
    assert set(engine.__all__) <= set(dir(engine))
    for name in ("load_model", "generate", "stream", "METHODS", "MethodOptions", "SamplingConfig", "speedup",
                 "pass_split", "rejudge"):
        assert name in engine.__all__, name
