"""A result names the commit of the code that made it: the checkout's, or the one a copied
tree was sent from (WB_SOURCE_COMMIT)."""

import re

from workbench import provenance


def test_the_checkout_names_its_commit():
    provenance.git_commit.cache_clear()
    try:
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", provenance.git_commit())
    finally:
        provenance.git_commit.cache_clear()


def test_a_copied_tree_names_the_commit_it_was_sent_from(monkeypatch):
    monkeypatch.setenv("WB_SOURCE_COMMIT", "3eb731e0000000000000000000000000000000aa")
    provenance.git_commit.cache_clear()
    try:
        assert provenance.git_commit() == "3eb731e0000000000000000000000000000000aa"
    finally:
        provenance.git_commit.cache_clear()
