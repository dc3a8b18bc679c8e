"""docs/times.yaml is the one source of the make targets' times: every entry names a target and the load
average it was measured at, `make help` prints each entry's time and load, no `##` comment of the
Makefile carries a time of its own, and every time the README quotes on a `make <target>` line is that
target's entry."""
import re
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, paper_script

TIMES_FILE = ROOT / "docs" / "times.yaml"
TIMES = yaml.safe_load(TIMES_FILE.read_text())
MAKEFILE = (ROOT / "Makefile").read_text()
# a duration as the docs write it: "~2 min", "25-70 s", "< 1 min", "1.5 min"
DURATION = re.compile(r"(?:~|< ?)?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|min)\b")
LINE = re.compile(r'^([a-z][a-z-]*): *\{time: "([^"]+)", load: "([^"]+)"\}$')


def help_comments() -> dict[str, str]:
    """target -> its `## ` comment in the Makefile."""
    return {m[1]: m[2] for m in re.finditer(r"^([a-zA-Z_-]+):.*?## (.*)$", MAKEFILE, re.M)}


def test_every_entry_is_a_target_with_a_time_and_a_load():
    figures = {f"fig-{e.name}" for e in paper_script("registry").entries(paper_script("registry").load())}
    targets = set(help_comments()) | figures
    assert TIMES and set(TIMES) <= targets, set(TIMES) - targets
    for target, entry in TIMES.items():
        assert set(entry) == {"time", "load"}, target
        assert DURATION.fullmatch(entry["time"]), (target, entry["time"])
        assert entry["load"].strip(), target


def test_every_entry_is_one_line_that_make_help_reads():
    lines = [line for line in TIMES_FILE.read_text().splitlines() if line and not line.startswith("#")]
    parsed = {m[1]: {"time": m[2], "load": m[3]} for m in map(LINE.match, lines) if m}
    assert len(lines) == len(parsed) and parsed == TIMES


def test_make_help_prints_every_time_and_its_load():
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    for target, entry in TIMES.items():
        assert lines[target].endswith(f"[{entry['time']}, load {entry['load']}]"), lines[target]
    assert len(DURATION.findall(lines["report"])) == 0           # an untimed target prints no time


@pytest.mark.parametrize("target", sorted(TIMES))
def test_no_makefile_comment_has_a_time_of_its_own(target):
    """A timed target's `##` comment holds no duration but its quick mode's (`ARGS=--quick: ~1 min`)."""
    comment = re.sub(r"--quick: [^;)]*", "", help_comments().get(target, ""))
    assert not DURATION.findall(comment), (target, comment)


def test_the_readme_quotes_the_times_of_docs_times_yaml():
    quoted = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r"make ([a-z][a-z-]*)\b", line)
        if m and DURATION.findall(line):
            quoted[m[1]] = DURATION.findall(line)
    assert {"run", "test", "figs", "setup"} <= set(quoted)
    for target, durations in quoted.items():
        assert target in TIMES, f"README quotes a time for make {target}: add it to docs/times.yaml"
        assert durations == [TIMES[target]["time"]], (target, durations, TIMES[target]["time"])
    assert "docs/times.yaml" in (ROOT / "README.md").read_text()
