"""deploy-tests/run.sh with DEPLOY_TESTS_VENV (scripts/test's one virtualenv for its four
runs): a directory that is neither empty nor a virtualenv (an operator's mistake, such as
a home directory) is refused, not cleared."""

import os
import pathlib
import subprocess

RUN = pathlib.Path(__file__).resolve().parent / "run.sh"


def test_a_directory_that_is_not_a_virtualenv_is_refused_and_left_as_it_was(tmp_path):
    kept = tmp_path / "notes.txt"
    kept.write_text("not a virtualenv\n")
    result = subprocess.run([str(RUN), "--venv-only"], env={**os.environ, "DEPLOY_TESTS_VENV": str(tmp_path)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"DEPLOY_TESTS_VENV={tmp_path} is neither empty nor a virtualenv: not touching it" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]
    assert kept.read_text() == "not a virtualenv\n"
