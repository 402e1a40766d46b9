"""README and the documentation against what they describe: the method registry and CI."""
import re
from pathlib import Path

from engine import METHODS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """README's text under `## title`, up to the next `## ` heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def test_the_methods_table_is_the_registry_in_order_with_its_lossless_flags():
    rows = re.findall(r"^\| `(\w+)` \|.*\| (yes|no) \|$", section("Decoding methods"), re.M)
    assert [name for name, _ in rows] == list(METHODS)
    assert {name: lossless == "yes" for name, lossless in rows} == {n: m.lossless for n, m in METHODS.items()}


def test_ci_builds_the_docs_strictly_then_runs_the_readmes_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", section("Quick start (fresh machine)"), re.S)
    test_command = commands[1].split(" && ")[-1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci, f"{test_command!r} is not a line of .ci/run"
    assert "mkdocs build --strict" in ci and ci.index("mkdocs build --strict") < ci.index(test_command)


def test_the_readme_stays_a_five_minute_read_under_its_spaces_front_matter():
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    assert lines[0] == "---" and "sdk: gradio" in lines and "app_file: app.py" in lines

