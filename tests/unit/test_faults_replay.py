"""docs/faults.md's fault matrices against `make faults` (scripts/faults.py): every row of the docs is replayed
from the command line or pinned by a test file that exists, and every replayed row is a row of the docs."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("faults_script", ROOT / "scripts" / "faults.py")
faults = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)


def test_every_row_of_the_matrices_is_replayed_or_pinned_by_an_existing_test_file():
    rows = faults.doc_rows()
    neither = [row.key for row in rows if row.key not in faults.ROWS and not row.tests]
    missing = [(row.key, t) for row in rows for t in row.tests if not (ROOT / t).is_file()]
    assert neither == [] and missing == []


def test_every_replayed_row_is_a_row_of_the_docs_and_the_rows_are_unique():
    keys = [row.key for row in faults.doc_rows()]
    assert len(keys) == len(set(keys))
    assert sorted(set(faults.ROWS) - set(keys)) == []


def test_every_table_line_of_the_three_matrices_is_read():
    """An independent count: the lines of the matrices' sections that start with a row's `#`."""
    text = (ROOT / "docs" / "faults.md").read_text()
    counted = 0
    for section in re.split(r"\n(?=## )", text):
        if section.startswith(faults.MATRICES):
            counted += len(re.findall(r"^\| (?:m1-\d+|m3-\d+|\d+b?) \|", section, flags=re.M))
    rows = faults.doc_rows()
    assert counted == len(rows) and {r.key[:3] for r in rows} >= {"m1-", "m3-"} and "1" in {r.key for r in rows}


@pytest.mark.parametrize("cell, previous, files", [
    ("U, I", (), ("tests/unit/test_faults_inprocess.py", "tests/integration/test_faults.py")),
    ("F, FC (serial)", (), ("tests/unit/test_faults_fourth.py", "tests/integration/test_faults_fourth_cli.py")),
    ("`tests/integration/test_orphans_mpi.py` (slow), T", (),
     ("tests/integration/test_orphans_mpi.py", "tests/unit/test_faults_third.py")),
    ("T (`test_a_failed_torch_rank_is_one_line_on_stderr`, both)", (), ("tests/unit/test_faults_third.py",)),
    ("same (slow)", ("tests/x.py",), ("tests/x.py",)),
    ("-", (), ()),
])
def test_the_test_column_names_its_files(cell, previous, files):
    assert faults.test_files(cell, previous) == files


def test_a_row_with_no_test_and_no_replay_is_found():
    text = "## Fault matrix\n\n| # | case | observed | status | test |\n|---|---|---|---|---|\n" \
           "| m1-1 | a | b | 2 | S |\n| m1-2 | c | d | 2 | - |\n\n## Resume\n| x | y | z | w | v |\n"
    rows = faults.doc_rows(text)
    assert [(r.key, r.tests) for r in rows] == [("m1-1", ("tests/unit/test_schema.py",)), ("m1-2", ())]
