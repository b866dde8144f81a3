"""A private single-node Slurm for the tests and the benchmarks: munged, slurmctld, slurmd (and optionally slurmdbd + MariaDB).

Why a real Slurm rather than a fake: the chain logic depends on facts only the real thing shows - when an
``afterany`` successor starts, what ``squeue`` prints for many ids at once, how a job ends at its time
limit (SIGTERM, then SIGKILL after ``KillWait``, state TIMEOUT), and that ``squeue`` forgets jobs after
``MinJobAge``. Everything lives in one temporary directory: its own munge key and socket, its own ports on
loopback, its own state, spool and logs; nothing under ``/etc`` or ``/run`` is touched, so several test
sessions can run their own clusters side by side. :meth:`SlurmCluster.stop` kills every daemon it started.

Use: ``with SlurmCluster.start() as slurm: subprocess.run(["sbatch", ...], env=slurm.env)``.
``SlurmUnavailable`` says in one line why a cluster cannot start (not root, packages absent, a daemon
failed); the pytest fixture turns it into a skip, or into a failure when ``NNLO_REQUIRE_SLURM=1``.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the repository (this module sits in its bench/; a benchmark never imports the tests, the tests import this)
REPO = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO / "scripts" / "install-slurm.sh"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol")
ACCOUNTING_BINARIES = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db")
CLUSTER_NAME = "nnlotest"
# a throw-away accounting database: no fsync per transaction (slurmdbd creates its tables in ~1 s, not ~60 s)
_NO_FSYNC = ("--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--sync-binlog=0",
             "--innodb-flush-method=nosync")


class SlurmUnavailable(RuntimeError):
    """The private Slurm cannot run here; the message says why in one line."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if shutil.which(n) is None and not Path("/usr/sbin", n).exists()]


def ensure_installed(accounting: bool = False) -> None:
    """Install the packages through ``scripts/install-slurm.sh`` when absent (root + apt only)."""
    wanted = BINARIES + (ACCOUNTING_BINARIES if accounting else ())
    if not _missing(wanted):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"Slurm is not installed ({', '.join(_missing(wanted))} missing) and this is not root: "
                               "run scripts/install-slurm.sh as root")
    subprocess.run(["bash", str(INSTALL_SCRIPT)], check=False, timeout=900)
    still = _missing(wanted)
    if still:
        raise SlurmUnavailable(f"scripts/install-slurm.sh could not install {', '.join(still)}")


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _real_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return max(256, int(line.split()[1]) // 1024 // 2)
    return 1024


@dataclass
class SlurmCluster:
    """A running private Slurm. ``env`` is what a client (sbatch, squeue, nnlo) needs to reach it."""

    root: Path
    env: dict[str, str]
    accounting: bool = False
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _pidfiles: list[Path] = field(default_factory=list)

    # ----------------------------------------------------------------- start and stop
    @classmethod
    def start(cls, accounting: bool = False, cpus: int | None = None) -> "SlurmCluster":
        if os.geteuid() != 0:
            raise SlurmUnavailable("the private test Slurm needs root (slurmd runs jobs as their user); "
                                   "run the tests as root or in CI")
        ensure_installed(accounting)
        root = Path(tempfile.mkdtemp(prefix="nnlo-slurm-", dir="/tmp"))
        os.chmod(root, 0o755)
        env = dict(os.environ)
        env["SLURM_CONF"] = str(root / "slurm.conf")
        for var in list(env):  # a Slurm of the outer world (if we run inside a job) must not leak in
            if var.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SRUN_", "SALLOC_")) and var != "SLURM_CONF":
                del env[var]
        cluster = cls(root=root, env=env, accounting=accounting)
        try:
            cluster._start_munge()
            if accounting:
                cluster._start_accounting()
            cluster._write_conf(cpus or max(8, os.cpu_count() or 1))
            cluster._start_daemons()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def __enter__(self) -> "SlurmCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, argv: list[str], log: str, **kw) -> subprocess.Popen:
        out = open(self.root / log, "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=self.env, start_new_session=True, **kw)
        out.close()
        self._procs.append(proc)
        return proc

    def _start_munge(self) -> None:
        d = self.root / "munge"
        d.mkdir(mode=0o700)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = d / "munge.sock"
        self._spawn([_which("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                     f"--seed-file={d / 'munged.seed'}"], "munged.out")
        self._wait_for(lambda: self.munge_socket.exists(), "munged", d / "munged.log")

    def _write_conf(self, cpus: int) -> None:
        r = self.root
        for sub in ("state", "spool", "log"):
            (r / sub).mkdir(exist_ok=True)
        self.ctld_port, self.slurmd_port = _free_port(), _free_port()
        acct = (f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
                f"AccountingStoragePort={self.dbd_port}\nAccountingStoragePass={self.munge_socket}\n"
                "JobAcctGatherType=jobacct_gather/linux\n"
                if self.accounting else "AccountingStorageType=accounting_storage/none\n"
                "JobAcctGatherType=jobacct_gather/none\n")
        (r / "slurm.conf").write_text(f"""# private test cluster written by bench/private_slurm.py
ClusterName={CLUSTER_NAME}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# quick ends at the time limit and jobs kept in memory long enough for squeue-based status
KillWait=20
OverTimeLimit=0
MinJobAge=600
InactiveLimit=0
Waittime=0
JobCompType=jobcomp/none
{acct}NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_real_memory_mb()} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")

    def _start_daemons(self) -> None:
        conf = str(self.root / "slurm.conf")
        self._spawn([_which("slurmctld"), "-D", "-i", "-f", conf], "slurmctld.out")
        self._wait_for(lambda: self._ok(["scontrol", "ping"], "UP"), "slurmctld", self.root / "log" / "slurmctld.log")
        self._spawn([_which("slurmd"), "-D", "-N", "localhost", "-f", conf], "slurmd.out")
        self._wait_for(lambda: self._ok(["sinfo", "-h", "-o", "%T"], "idle"), "slurmd",
                       self.root / "log" / "slurmd.log")

    # ----------------------------------------------------------------- accounting (sacct)
    def _start_accounting(self) -> None:
        r = self.root
        db = r / "mariadb"
        db.mkdir()
        shutil.chown(db, "mysql", "mysql")
        self.db_socket = db / "mysqld.sock"
        self.db_port, self.dbd_port = _free_port(), _free_port()
        subprocess.run([_which("mariadb-install-db"), f"--datadir={db / 'data'}", "--user=mysql",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=120)
        self._spawn([_which("mariadbd"), "--no-defaults", f"--datadir={db / 'data'}", "--user=mysql",
                     f"--socket={self.db_socket}", f"--port={self.db_port}", "--bind-address=127.0.0.1",
                     f"--pid-file={db / 'mariadb.pid'}", "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
                     "--innodb-log-file-size=8M", *_NO_FSYNC], "mariadb.out")
        self._wait_for(lambda: self.db_socket.exists(), "mariadbd", r / "mariadb.out")
        sql = ("CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'nnlo';"
               "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'nnlo';"
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';FLUSH PRIVILEGES;")
        subprocess.run([_which("mariadb"), "--no-defaults", f"--socket={self.db_socket}", "-uroot", "-e", sql],
                       check=True, capture_output=True, timeout=60)
        dbd_conf = r / "slurmdbd.conf"
        dbd_conf.write_text(f"""AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass=nnlo
StorageLoc=slurm_acct_db
PidFile={r / 'slurmdbd.pid'}
LogFile={r / 'slurmdbd.log'}
""")
        dbd_conf.chmod(0o600)
        # slurmdbd reads slurmdbd.conf from the directory of SLURM_CONF
        self._spawn([_which("slurmdbd"), "-D"], "slurmdbd.out")
        self._wait_for(lambda: _port_open(self.dbd_port), "slurmdbd", r / "slurmdbd.log")
        # no `sacctmgr add cluster`: slurmctld registers its cluster itself when it first connects (and
        # sacctmgr run before slurmctld is up waits a minute trying to tell it)

    # ----------------------------------------------------------------- helpers
    def _ok(self, argv: list[str], needle: str) -> bool:
        try:
            out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return out.returncode == 0 and needle in out.stdout

    def _wait_for(self, ready, what: str, log: Path, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        raise SlurmUnavailable(f"{what} did not start: {' | '.join(tail) or 'no log'} (files in {self.root})")

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check,
                              timeout=timeout)

    def stop(self) -> None:
        """Stop every daemon (and every job process in their sessions) this cluster started."""
        if shutil.which("scancel") and (self.root / "slurm.conf").exists():
            subprocess.run(["scancel", "--full", "--user", str(os.geteuid())], env=self.env,
                           capture_output=True, timeout=30, check=False)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self._procs.clear()
        self._kill_leftovers()
        if not os.environ.get("NNLO_KEEP_SLURM"):
            shutil.rmtree(self.root, ignore_errors=True)


    def _kill_leftovers(self) -> None:
        """slurmstepd and job processes outlive slurmd (they run in their own sessions): end every process
        whose environment names this cluster's SLURM_CONF - ours alone, found by id, never by name."""
        mine = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        me = os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if mine in environ.split(b"\0"):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
