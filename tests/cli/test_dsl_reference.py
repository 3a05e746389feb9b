"""The DSL reference (issue 39 item 7): docs/dsl-reference.md is what the generator writes
from the docstrings (stale: this fails), every name `from workbench import *` gives has a
text, and the names the issue found undocumented are there."""

from __future__ import annotations

from conftest import ROOT

from workbench.cli import reference


def test_the_committed_reference_is_the_generated_one():
    committed = (ROOT / "docs/dsl-reference.md").read_text()
    assert committed == reference.reference_text(), (
        "docs/dsl-reference.md is stale: run python -m workbench.cli.reference")
    assert reference.main(["--check"]) == 0


def test_every_exported_name_has_a_text():
    assert reference.missing() == []


def test_a_name_without_a_docstring_is_found(monkeypatch):
    import workbench

    def undocumented(x):
        return x

    monkeypatch.setattr(workbench, "undocumented", undocumented, raising=False)
    monkeypatch.setattr(workbench, "__all__", [*workbench.__all__, "undocumented"])
    assert reference.missing() == ["undocumented"]
    assert reference.main(["--check"]) == 2


def test_the_issue_s_undocumented_names_are_documented():
    text = reference.reference_text()
    for heading in ("### `Send(", "### `Stage(", "### `Pipeline(", "### `OnRoot(",
                    "### `s.allreduce_algorithm(", "### `Dropout(", "### `Prod`",
                    "### `Scalar(", "### `Group(", "### `Gather(", "### `TopK("):
        assert heading in text, heading
    assert "`abs(a)`" in text
