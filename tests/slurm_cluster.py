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

Needs root (slurmd starts job steps as the submitting user), Linux /proc, and the binaries;
`missing()` says what is absent, for a skip reason.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "salloc", "sinfo", "scancel",
            "squeue")
MARKER = "BERT_TEST_SLURM_CLUSTER"
# Slurm variables of an enclosing job (pytest itself inside an allocation) must not reach the
# client commands: srun would try to join that job.
_CLIENT_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "MUNGE_")


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None if it can."""
    absent = [name for name in BINARIES if not shutil.which(name, path=_sbin_path())]
    if absent:
        return (f"Slurm test cluster: {', '.join(absent)} not found (Debian: apt-get install "
                f"slurm-wlm munge)")
    if os.geteuid() != 0:
        return "Slurm test cluster: slurmd must run as root to start job steps"
    if not Path("/proc/self/environ").exists():
        return "Slurm test cluster: needs Linux /proc"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            self._write_files()
            self._spawn("munged", ["munged", "-F", f"--socket={self.munge_socket}",
                                   f"--key-file={self.root / 'munge' / 'munge.key'}",
                                   f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                                   f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                                   "--num-threads=2"])
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
        ctld_port, slurmd_port = _free_port(), _free_port()
        log = self.root / "log"
        self._logs = {"slurmctld": log / "slurmctld.log", "slurmd": log / "slurmd.log",
                      "munged": log / "munged.log"}
        self.conf.write_text(f"""\
# Generated by tests/slurm_cluster.py for one test session.
ClusterName=berttest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
PlugStackConfig={self.root / 'plugstack.conf'}
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool'}
SlurmctldPidFile={self.root / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'slurmd.pid'}
SlurmctldLogFile={self._logs['slurmctld']}
SlurmdLogFile={self._logs['slurmd']}
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
        out = open(self._logs[name] if name == "munged" else self.root / "log" / f"{name}.out",
                   "ab")
        try:
            self.procs[name] = subprocess.Popen(
                cmd, cwd=self.root, env=self.env(),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            out.close()

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"Slurm test cluster: {name} exited with status "
                                       f"{proc.returncode} while waiting for {what}\n"
                                       f"{self.log_tails()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm test cluster: no {what} within {self.start_timeout_s:.0f} s"
                           f"\n{self.log_tails()}")

    def _node_idle(self) -> bool:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env(),
                              capture_output=True, text=True, timeout=30)
        return proc.returncode == 0 and f"{self.node} idle" in proc.stdout.splitlines()

    def log_tails(self) -> str:
        parts = []
        for path in sorted({*self._logs.values(), *(self.root / "log").glob("*.out")}):
            parts.append(f"  -- {path}:\n{_tail(path)}")
        return "\n".join(parts)

    def version(self) -> str:
        return subprocess.run(["sinfo", "--version"], env=self.env(), capture_output=True,
                              text=True, timeout=30).stdout.strip()

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
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie: dead, waiting for its parent to reap it
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace").strip()
            except (OSError, IndexError):
                continue  # gone meanwhile, or not ours to read
            found[int(entry.name)] = cmdline
        return found

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
        if check:
            alive = {name: p.pid for name, p in self.procs.items() if p.poll() is None}
            left = self.leftovers()
            assert not alive and not left, (
                f"Slurm test cluster: processes outlived the tests: daemons {alive}, "
                f"marked processes {left}")

    def cancel_all(self, wait_s: float = 10.0) -> None:
        """scancel every job (batch scripts and steps too), and wait for the queue to empty."""
        if "slurmctld" not in self.procs or self.procs["slurmctld"].poll() is not None:
            return
        try:
            subprocess.run(["scancel", "--full", "--user", pwd.getpwuid(os.geteuid()).pw_name],
                           env=self.env(), capture_output=True, timeout=30)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self._jobs_left():
                time.sleep(0.3)
        except subprocess.TimeoutExpired:
            pass  # stop() kills what is left by its marker

    def _jobs_left(self) -> bool:
        proc = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env(), capture_output=True,
                              text=True, timeout=30)
        return proc.returncode == 0 and bool(proc.stdout.strip())
