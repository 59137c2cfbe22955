"""A throw-away one-node Slurm cluster for tests (Debian's slurm-wlm and munge packages).

    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-")))
    cluster.start()                       # munged, slurmctld, slurmd; waits for an idle node
    subprocess.run(["sbatch", ...], env=cluster.env())
    cluster.stop()                        # kills job steps and daemons; raises if any survive

Everything lives under one folder: a generated munge key, munged's socket, slurm.conf (its own
ports, state, spool, pid and log files), the daemons' logs. The daemons run in the foreground as
children of this process (munged -F, slurmctld -D, slurmd -D), each in its own session. Client
commands reach this cluster only through `env()`: SLURM_CONF names the generated slurm.conf,
whose AuthInfo=socket=... points Slurm's auth/munge and cred/munge plugins at this munged, and
no SLURM_* variable of an enclosing job leaks in.

Every daemon and every job process carries the environment variable MARKER=<folder>: slurmd
passes its environment on to slurmstepd, and jobs get the submitting environment. `stop()`
finds what is left by that marker (in /proc/<pid>/environ), so job steps that slurmd left
behind are killed too, and then checks by pid that nothing of the cluster is alive.

All daemons run as the current user (SlurmUser and SlurmdUser; root is not needed, since jobs
run as that same user). Needs Linux /proc and the binaries; `missing()` says what is absent,
for a skip reason.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = (
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "srun",
    "salloc",
    "sinfo",
    "scancel",
    "squeue",
    "scontrol",
)
MARKER = "BERT_TEST_SLURM_CLUSTER"
_LIVE_JOB_STATES = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "RESIZING",
    "REQUEUED",
    "SIGNALING",
    "STAGE_OUT",
}
# Slurm variables of an enclosing job (pytest itself inside an allocation) must not reach the
# client commands: srun would try to join that job.
_CLIENT_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "MUNGE_")


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None if it can."""
    absent = [name for name in BINARIES if not shutil.which(name, path=_sbin_path())]
    if absent:
        return (
            f"Slurm test cluster: {', '.join(absent)} not found (Debian: apt-get install "
            f"slurm-wlm munge)"
        )
    if not Path("/proc/self/environ").exists():
        return "Slurm test cluster: needs Linux /proc"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# prctl(2): orphaned descendants (slurmd's slurmstepd, whose parent exits at once) are
# re-parented to this process instead of init, so that stop() can reap them: an init that
# does not reap (a container's) would otherwise keep them as zombies.
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def _subreaper(on: bool | None = None) -> bool:
    """Set (on) or read (None) whether this process adopts its orphaned descendants."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if on is None:
            flag = ctypes.c_int(0)
            return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and bool(
                flag.value
            )
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(command name, state, parent pid) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2 :].split()[:2]
    return name, state, int(ppid)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as err:
        return f"    ({path}: {err.strerror})"
    return "\n".join(f"    {line}" for line in text[-lines:]) or "    (empty)"


class SlurmCluster:
    """One node (this machine, all its CPUs), one partition `test`, no accounting."""

    def __init__(self, root: Path, start_timeout_s: float = 60.0):
        self.root = Path(root)
        self.start_timeout_s = start_timeout_s
        self.node = socket.gethostname().split(".")[0]
        self.cpus = len(os.sched_getaffinity(0))
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, Path] = {}
        self._was_subreaper = _subreaper()
        self._seen: set[int] = set()  # pids that carried the marker

    # -- environment -------------------------------------------------------------------------

    def env(self, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
        """The environment for client commands (sbatch, srun, salloc, sinfo) of this cluster."""
        base = dict(os.environ if base is None else base)
        env = {k: v for k, v in base.items() if not k.startswith(_CLIENT_PREFIXES)}
        env.update(SLURM_CONF=str(self.conf), PATH=_sbin_path(), **{MARKER: str(self.root)})
        env.update(extra)
        return env

    # -- start -------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            _subreaper(True)
            self._write_files()
            self._spawn(
                "munged",
                [
                    "munged",
                    "-F",
                    f"--socket={self.munge_socket}",
                    f"--key-file={self.root / 'munge' / 'munge.key'}",
                    f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                    f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                    "--num-threads=2",
                ],
            )
            self._wait_for(lambda: self.munge_socket.exists(), "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)])
            self._spawn("slurmd", ["slurmd", "-D", "-c", "-N", self.node, "-f", str(self.conf)])
            self._wait_for(self._node_idle, f"sinfo to show node {self.node} idle")
        except BaseException:
            self.stop(check=False)
            raise

    def _write_files(self) -> None:
        user = pwd.getpwuid(os.geteuid()).pw_name
        munge = self.root / "munge"
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket folder that others cannot search, and a readable key.
        os.chmod(self.root, 0o755)
        os.chmod(munge, 0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        (self.root / "plugstack.conf").write_text("")  # not the system's /etc/slurm one
        ctld_port, slurmd_port = free_port(), free_port()
        log = self.root / "log"
        self._logs = {
            "slurmctld": log / "slurmctld.log",
            "slurmd": log / "slurmd.log",
            "munged": log / "munged.log",
        }
        self.conf.write_text(f"""\
# Generated by tests/slurm_cluster.py for one test session.
ClusterName=berttest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
PlugStackConfig={self.root / "plugstack.conf"}
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation={self.root / "state"}
SlurmdSpoolDir={self.root / "spool"}
SlurmctldPidFile={self.root / "slurmctld.pid"}
SlurmdPidFile={self.root / "slurmd.pid"}
SlurmctldLogFile={self._logs["slurmctld"]}
SlurmdLogFile={self._logs["slurmd"]}
SlurmctldDebug=info
SlurmdDebug=info
KillWait=5
MessageTimeout=10
InactiveLimit=0
MinJobAge=300
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(
            self._logs[name] if name == "munged" else self.root / "log" / f"{name}.out", "ab"
        )
        try:
            self.procs[name] = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"Slurm test cluster: {name} exited with status "
                        f"{proc.returncode} while waiting for {what}\n"
                        f"{self.log_tails()}"
                    )
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(
            f"Slurm test cluster: no {what} within {self.start_timeout_s:.0f} s\n{self.log_tails()}"
        )

    def _node_idle(self) -> bool:
        proc = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.returncode == 0 and f"{self.node} idle" in proc.stdout.splitlines()

    def log_tails(self) -> str:
        parts = []
        for path in sorted({*self._logs.values(), *(self.root / "log").glob("*.out")}):
            parts.append(f"  -- {path}:\n{_tail(path)}")
        return "\n".join(parts)

    def wait_job(self, job_id: str, timeout_s: float) -> tuple[str, int] | None:
        """Poll a batch job every 0.5 s until it ends: (JobState, exit status of its script),
        or None on timeout. (`sbatch --wait` polls after 2, 10, 42, 74... s: up to 32 s late.)"""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = subprocess.run(
                ["scontrol", "show", "job", "--oneliner", job_id],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=30,
            )
            fields = dict(item.split("=", 1) for item in proc.stdout.split() if "=" in item)
            if fields.get("JobState", "PENDING") not in _LIVE_JOB_STATES:
                return fields["JobState"], int(fields.get("ExitCode", "-1:0").split(":")[0])
            time.sleep(0.5)
        return None

    # -- stop --------------------------------------------------------------------------------

    def leftovers(self) -> dict[int, str]:
        """pid -> command line of every live process carrying this cluster's marker."""
        needle = f"{MARKER}={self.root}".encode()
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                cmdline = (
                    (entry / "cmdline")
                    .read_bytes()
                    .replace(b"\0", b" ")
                    .decode(errors="replace")
                    .strip()
                )
            except OSError:
                continue  # gone meanwhile, or not ours to read
            pid = int(entry.name)
            self._seen.add(pid)
            stat = _stat(pid)
            if stat is not None and stat[1] != "Z":  # a zombie is dead, only not reaped yet
                found[pid] = cmdline
        return found

    def _reap(self) -> list[int]:
        """Reap the cluster's zombies whose parent is this process (slurmstepd, srun's
        shepherd child, orphaned tasks; a marked child it started itself too): the pids of
        those still there."""
        daemons = {
            "munged",
            "slurmctld",
            "slurmd",
            "slurmstepd",
            "slurmscriptd",
            "srun",
            "salloc",
            "sbatch",
        }
        owned = {p.pid for p in self.procs.values()}  # Popen reaps those itself
        ours = []
        for entry in Path("/proc").iterdir():
            stat = _stat(int(entry.name)) if entry.name.isdigit() else None
            pid = int(entry.name) if stat else 0
            if (
                stat
                and stat[1] == "Z"
                and stat[2] == os.getpid()
                and pid not in owned
                and (stat[0] in daemons or pid in self._seen)
            ):
                ours.append(pid)
        for pid in ours:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return [pid for pid in ours if _stat(pid) is not None]

    def stop(self, check: bool = True) -> None:
        """Cancel jobs, stop the daemons (TERM, then KILL), kill any job step left behind.

        check: raise if any process of the cluster is still alive afterwards.
        """
        self.cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)
        for _ in range(3):
            left = self.leftovers()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        zombies = self._reap()
        if not self._was_subreaper:
            _subreaper(False)
        if check:
            alive = {name: p.pid for name, p in self.procs.items() if p.poll() is None}
            left = self.leftovers()
            assert not alive and not left and not zombies, (
                f"Slurm test cluster: processes outlived the tests: daemons {alive}, "
                f"marked processes {left}, unreaped zombies {zombies}"
            )

    def cancel_all(self, wait_s: float = 10.0) -> None:
        """scancel every job (batch scripts and steps too), and wait for the queue to empty."""
        if "slurmctld" not in self.procs or self.procs["slurmctld"].poll() is not None:
            return
        try:
            subprocess.run(
                ["scancel", "--full", "--user", pwd.getpwuid(os.geteuid()).pw_name],
                env=self.env(),
                capture_output=True,
                timeout=30,
            )
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self._jobs_left():
                time.sleep(0.3)
        except subprocess.TimeoutExpired:
            pass  # stop() kills what is left by its marker

    def _jobs_left(self) -> bool:
        proc = subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=self.env(), capture_output=True, text=True, timeout=30
        )
        return proc.returncode == 0 and bool(proc.stdout.strip())
