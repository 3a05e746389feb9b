"""The README's two set-up commands are the ones CI runs."""

from conftest import ROOT

COMMANDS = [
    "pip install -e '.[dev]' && workbench simulate studies/adam.py --hardware h200x4",
    "python -m pytest",
]


def test_readme_and_ci_run_the_same_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in COMMANDS:
        assert f"```bash\n{command}\n```" in readme
        assert command in ci
