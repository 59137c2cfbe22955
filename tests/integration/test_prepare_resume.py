"""Data prep survives a crash: `prepare_data.py all` killed with SIGKILL after its first output
file and run again ends with the same bytes as a run never stopped, and nothing half-written
under a final name; plus the disk check (refusal before writing) and the progress lines.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert.core.files import remove_stale_temps, temp_name
from data.prepare import reshard as reshard_module
from data.prepare.disk import FREE_BYTES_ENV, content_bytes
from data.prepare.parallel import StepRun
from data.prepare.progress import Progress, duration
from data.prepare.to_varlen import to_varlen
from prepare_corpus import MAX_LEN, MAX_PRED, ROOT, SCRIPT, all_args, reshard_quietly, write_corpus


def all_command(corpus, out: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), *all_args(corpus, out, "--shards-per-bucket", "1")]


def run(command: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative name, its own folder's path written as OUT."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes().replace(
            str(folder.resolve()).encode(), b"OUT"
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "out"
    proc = run(all_command(corpus, out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def kill_after_first_output(command: list[str], watch: Path) -> str:
    """Start `command`, SIGKILL its whole process group once a final .hdf5 appears in
    `watch`; returns its stderr so far."""
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while not list(watch.glob("[!.]*.hdf5")):
        assert proc.poll() is None, "the run ended before its first output: nothing to kill"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc.stderr.read()


def test_killed_run_resumes_to_identical_output(corpus, uninterrupted, tmp_path):
    out = tmp_path / "out"
    stderr = kill_after_first_output(all_command(corpus, out), out / "intermediate" / "train")
    assert "all: will write about" in stderr  # the disk estimate came before any file
    made = sorted(p.name for p in (out / "intermediate" / "train").glob("[!.]*.hdf5"))
    assert 1 <= len(made) < 3 and not (out / "train").exists()  # killed in the middle
    proc = run(all_command(corpus, out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"examples: {len(made)} of 3 outputs exist, skipped" in proc.stdout
    assert f"examples: {3 - len(made)}/{3 - len(made)} files" in proc.stderr  # progress
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no leftovers
    assert not (out / "train" / reshard_module.TMP_NAME).exists()
    mine, theirs = files_of(out), files_of(uninterrupted)
    assert sorted(mine) == sorted(theirs)
    for name in theirs:
        assert mine[name] == theirs[name], name


def test_reshard_interrupted_in_either_pass_resumes_identically(
    uninterrupted, tmp_path, monkeypatch
):
    inputs = sorted((uninterrupted / "intermediate" / "train").glob("*.hdf5"))
    expected = files_of(uninterrupted / "train")
    real_write = reshard_module.write_samples
    for crash_at in (2, 6):  # pass 1 (3 inputs x pieces) and pass 2 (the shards)
        out = tmp_path / f"crash_{crash_at}"
        calls = []

        def failing_write(path, samples):
            calls.append(path)
            if len(calls) == crash_at:
                raise KeyboardInterrupt  # a crash mid-step, after some files are complete
            return real_write(path, samples)

        monkeypatch.setattr(reshard_module, "write_samples", failing_write)
        with pytest.raises(KeyboardInterrupt):
            reshard_quietly(inputs, out, show_progress=False)
        monkeypatch.setattr(reshard_module, "write_samples", real_write)
        reshard_quietly(inputs, out, show_progress=False)
        assert files_of(out) == expected, crash_at


@pytest.mark.parametrize("step", ["all", "examples"])
def test_too_little_disk_is_refused_before_writing(corpus, tmp_path, step):
    out = tmp_path / "out"
    command = all_command(corpus, out)
    if step == "examples":
        command = command[:2] + [
            "examples",
            str(corpus[0][0]),
            "--vocab",
            str(corpus[2]),
            "--out",
            str(out),
        ]
    proc = run(command, **{FREE_BYTES_ENV: "1000000"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "1.0 MB free" in errors[0] and "needs about" in errors[0]
    assert "Traceback" not in proc.stderr and not out.exists()


def test_quiet_run_prints_no_progress(corpus, uninterrupted, tmp_path):
    src = sorted((uninterrupted / "intermediate" / "train").glob("*.hdf5"))[0]
    base = [
        sys.executable,
        str(SCRIPT),
        "to-varlen",
        str(src),
        "--out",
        str(tmp_path / "v"),
        "--max-seq-length",
        str(MAX_LEN),
        "--max-predictions",
        str(MAX_PRED),
    ]
    loud, quiet = run(base), run([*base, "--quiet", "--out", str(tmp_path / "q")])
    assert loud.returncode == quiet.returncode == 0
    assert "to-varlen: 1/1 files" in loud.stderr and "to-varlen: will write" in loud.stderr
    assert quiet.stderr == "" and "to-varlen: wrote" in quiet.stdout


def test_varlen_estimate_is_close_to_the_real_size(uninterrupted, tmp_path):
    inputs = sorted((uninterrupted / "intermediate" / "train").glob("*.hdf5"))
    made = to_varlen(
        inputs, tmp_path, MAX_LEN, MAX_PRED, run=StepRun(log=lambda *_: None, show_progress=False)
    )
    estimate = sum(content_bytes(p) for p in inputs)
    real = sum(p.stat().st_size for p in made)
    assert 0.9 * real < estimate < 1.1 * real, (estimate, real)
    assert content_bytes(made[0]) == made[0].stat().st_size  # variable length: its size


def test_progress_line_counts_rate_and_eta():
    stream = io.StringIO()
    progress = Progress("examples", 4, total_work=100, stream=stream)
    progress.start -= 30  # 30 s in, a quarter of the work done
    progress.done(samples=600, work=25)
    line = stream.getvalue().strip()
    assert line.startswith("examples: 1/4 files, 600 samples, 20 samples/s, 30s elapsed")
    assert line.endswith("ETA 1m30s")
    assert duration(4000) == "1h06m" and duration(59.6) == "1m00s"
    quiet = Progress("x", 1, enabled=False, stream=stream)
    quiet.done(1)
    assert stream.getvalue().count("\n") == 1


def test_stale_temp_files_are_removed_live_ones_kept(tmp_path):
    final = tmp_path / "part.hdf5"
    live = temp_name(final)  # this process's: a writer still running
    dead = tmp_path / ".part.hdf5.999999999.0123abcd.tmp"  # no such process
    other = tmp_path / ".notes.tmp"  # not a temp_name: not ours to delete
    for path in (live, dead, other):
        path.write_text("x")
    assert remove_stale_temps(tmp_path) == [dead]
    assert live.exists() and other.exists() and not dead.exists()


def one_error_line(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def to_varlen_command(prepared: Path, out: Path) -> list[str]:
    """`prepare_data.py to-varlen` of `prepared`'s intermediate training examples into `out`
    (--max-predictions left to the caller)."""
    inputs = sorted(str(p) for p in (prepared / "intermediate" / "train").glob("*.hdf5"))
    command = [sys.executable, str(SCRIPT), "to-varlen", *inputs, "--out", str(out)]
    return [*command, "--max-seq-length", str(MAX_LEN)]


def test_a_folder_of_other_files_is_refused_unless_forced(uninterrupted, tmp_path):
    """A resumed step takes a file under an output's name as done, so a folder holding files
    the step does not write is refused before anything is written."""
    out = tmp_path / "varlen"
    out.mkdir()
    (out / "notes.txt").write_text("someone else's\n")
    command = [*to_varlen_command(uninterrupted, out), "--max-predictions", str(MAX_PRED)]
    one_error_line(run(command), "--out", "notes.txt", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert run([*command, "--force"]).returncode == 0
    assert (out / "notes.txt").read_text() == "someone else's\n"


def test_a_finished_folder_of_other_settings_is_refused(uninterrupted, tmp_path):
    """A finished step marks its folder with its settings: the same step with other settings
    (whose outputs have the same names) is refused instead of skipping them all as done."""
    out = tmp_path / "varlen"
    command = to_varlen_command(uninterrupted, out)
    assert run([*command, "--max-predictions", str(MAX_PRED)]).returncode == 0
    made = files_of(out)
    assert run([*command, "--max-predictions", str(MAX_PRED)]).returncode == 0  # a resume
    one_error_line(
        run([*command, "--max-predictions", str(MAX_PRED - 1)]),
        "--out",
        "to-varlen",
        "max_predictions",
        "--force",
    )
    assert files_of(out) == made
