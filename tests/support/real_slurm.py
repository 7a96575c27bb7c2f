"""A real Slurm on this machine: Debian's slurm-wlm (22.05), slurmdbd, munge and MariaDB, on loopback, with two
compute nodes on one host (two slurmd, ``slurmd -N n1`` and ``-N n2``, each on its own port).

What stands for what on a ParallelCluster cluster:

=================================  ====================================================================================
on the cluster                     here
=================================  ====================================================================================
the head node's users (ubuntu,     a mount namespace of the test's, in which /etc/passwd and /etc/group are copies with
the teams' members)                those users added (bind mounts: nothing of this machine's changes); every daemon and
                                   every client runs in it, a user's commands under ``setpriv`` as that user
the accounting database            MariaDB on 127.0.0.1 (its own port and data folder), its user and password made here
(Aurora MySQL, the stack's)        as the stack's secret holds them
munge, slurmdbd, slurmctld         the same daemons, in the foreground, on ports of their own; munge on its own socket
                                   (slurm.conf AuthInfo and AccountingStoragePass name it)
the compute nodes                  two slurmd on this host (``NodeAddr=127.0.0.1``), one CPU each
``sacctmgr add cluster``           run once here as ParallelCluster does when it configures a new cluster's database
=================================  ====================================================================================

The slurm.conf settings of fair share and enforced accounting are the project's (given as ``settings``); the rest of
slurm.conf is this plumbing, with ParallelCluster's scheduler and selection (sched/backfill, select/cons_tres with
CR_CPU). Needs root (daemons as root, users switched, the namespace): :func:`missing` says what is missing.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import string
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROGRAMS = ("slurmctld", "slurmd", "slurmdbd", "sacctmgr", "sbatch", "sacct", "sshare", "sprio", "squeue", "scontrol",
            "sinfo", "munged", "mariadbd", "mariadb-install-db", "mariadb", "unshare", "nsenter", "setpriv")
# The Debian packages that hold them (.ci/run installs them).
PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
MYSQL_PLUGIN = "/usr/lib/*/slurm-wlm/accounting_storage_mysql.so"
NODES = ("n1", "n2")
START_TIMEOUT_S = 60.0


def missing() -> str | None:
    """Why a real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: Slurm's daemons run as root, users are switched with setpriv, their passwd in a namespace"
    absent = [p for p in PROGRAMS if shutil.which(p, path=SYSTEM_PATH) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install {' '.join(PACKAGES)}; .ci/run does)"
    if not glob.glob(MYSQL_PLUGIN):
        return "slurmdbd's accounting_storage/mysql plugin is not installed (apt-get install slurmdbd)"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"no mount namespace here (unshare --mount: {probe.stderr.strip()})"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, ready: Callable[[], bool], timeout: float = START_TIMEOUT_S, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} did not start in {timeout:.0f}s\n{tail}")
        time.sleep(0.2)


class LocalSlurm:
    """A Slurm cluster in ``root`` (a folder every user may enter).

    :param cluster: ClusterName (and the cluster sacctmgr adds).
    :param database: the database slurmdbd keeps it in (StorageLoc: ParallelCluster's Database.DatabaseName).
    :param partition: the one partition of both nodes (a compute group's Slurm queue).
    :param settings: slurm.conf settings beyond the plumbing (the project's fair share and accounting).
    :param users: user name -> uid, the users of the head node (homes under ``root/home``).
    """

    def __init__(self, root: Path, *, cluster: str, database: str, partition: str,
                 settings: Sequence[tuple[str, str]], users: dict[str, int]) -> None:
        self.root, self.cluster, self.database, self.partition = root, cluster, database, partition
        self.settings, self.users = list(settings), dict(users)
        self.daemons: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.holder: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0  # how long start() took
        for folder in ("etc", "state", "spool", "log", "munge", "db", "home", "bin"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        self.conf = root / "etc" / "slurm.conf"
        self.munge_socket = root / "munge" / "munge.sock"
        # The database user's password, as the stack's secret generates it: letters and digits.
        self.password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
        self.ports = {name: _free_port() for name in ("slurmctld", "slurmdbd", "mysql", *NODES)}

    # -- running things in the cluster's namespace --------------------------------------------------------------

    def command(self, argv: Sequence[str], *, user: str | None = None) -> list[str]:
        """``argv`` in the cluster's namespace, as root or as ``user`` (its uid, gid and groups)."""
        assert self.holder is not None, "not started"
        switch = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"] if user else []
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *switch, "env", f"PATH={self.root / 'bin'}:{SYSTEM_PATH}",
                f"SLURM_CONF={self.conf}", *([f"HOME={self.home(user)}", f"USER={user}"] if user else []), *argv]

    def run(self, argv: Sequence[str], *, user: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(argv, user=user), capture_output=True, text=True, timeout=timeout,
                              check=False, cwd=self.home(user) if user else self.root)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} (as {user or 'root'}) failed ({done.returncode}): {done.stderr}")
        return done

    def home(self, user: str | None) -> Path:
        return self.root / "home" / (user or "root")

    def _daemon(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = (self.root / "log" / f"{name}.out").open("wb")
        process = subprocess.Popen(self.command(argv), stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        self.daemons.append((name, process))
        return process

    # -- start and stop -----------------------------------------------------------------------------------------

    def start(self) -> None:
        began = time.monotonic()
        self._namespace()
        self._munge()
        self._mariadb()
        self._slurmdbd()
        self.run(["sacctmgr", "-i", "add", "cluster", self.cluster])  # ParallelCluster's step for a new database
        self._slurm_conf()
        self._daemon("slurmctld", ["slurmctld", "-D"])
        _wait("slurmctld", lambda: self.run(["scontrol", "ping"], check=False).returncode == 0,
              log=self.root / "log" / "slurmctld.log")
        for node in NODES:
            (self.root / "spool" / node).mkdir(exist_ok=True)
            self._daemon(f"slurmd-{node}", ["slurmd", "-D", "-N", node])
        _wait("slurmd", lambda: self.idle_nodes() == len(NODES), log=self.root / "log" / "slurmctld.log")
        self.started_s = time.monotonic() - began

    def idle_nodes(self) -> int:
        said = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split()
        return sum(1 for state in said[1::2] if state == "idle")

    def stop(self) -> None:
        for _, process in reversed(self.daemons):
            process.terminate()
        for _, process in reversed(self.daemons):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()

    def _namespace(self) -> None:
        """A mount namespace whose /etc/passwd and /etc/group add the head node's users."""
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "infinity"])
        ours = os.readlink("/proc/self/ns/mnt")
        _wait("the namespace", lambda: os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != ours)  # type: ignore[union-attr]
        passwd = Path("/etc/passwd").read_text() + "".join(
            f"{name}:x:{uid}:{uid}::{self.home(name)}:/bin/bash\n" for name, uid in self.users.items())
        group = Path("/etc/group").read_text() + "".join(f"{name}:x:{uid}:\n" for name, uid in self.users.items())
        for name, text in (("passwd", passwd), ("group", group)):
            (self.root / "etc" / name).write_text(text)
            (self.root / "etc" / name).chmod(0o644)
            subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", "mount", "--bind",
                            str(self.root / "etc" / name), f"/etc/{name}"], check=True)
        for name, uid in self.users.items():
            self.home(name).mkdir(exist_ok=True)
            os.chown(self.home(name), uid, uid)

    def _munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (self.root / "munge").chmod(0o711)  # munged refuses a socket folder others cannot enter
        self._daemon("munged", ["munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
                                f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                                f"--log-file={self.root / 'log' / 'munged.log'}",
                                f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        _wait("munged", self.munge_socket.exists, log=self.root / "log" / "munged.log")

    def _mariadb(self) -> None:
        data, sock = self.root / "db" / "data", self.root / "db" / "mysql.sock"
        self.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                  "--auth-root-authentication-method=normal", "--skip-test-db"], timeout=120)
        # SchedMD's accounting guide: a lock wait of 900 s (the stack's parameter group sets the same).
        self._daemon("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={data}", "--user=root", f"--socket={sock}",
                                  f"--port={self.ports['mysql']}", "--bind-address=127.0.0.1", "--skip-log-bin",
                                  f"--pid-file={self.root / 'db' / 'mysqld.pid'}",
                                  f"--log-error={self.root / 'log' / 'mariadb.log'}",
                                  "--innodb-buffer-pool-size=64M", "--innodb-lock-wait-timeout=900"])
        ping = ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", "select 1"]
        _wait("mariadbd", lambda: self.run(ping, check=False).returncode == 0, log=self.root / "log" / "mariadb.log")
        grant = (f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self.password}'; "
                 f"GRANT ALL ON `{self.database}`.* TO 'slurm'@'127.0.0.1';")
        self.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", grant])

    def _slurmdbd(self) -> None:
        conf = self.root / "etc" / "slurmdbd.conf"  # beside slurm.conf: where slurmdbd reads it
        conf.write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo=socket={self.munge_socket}", "DbdHost=localhost",
            f"DbdPort={self.ports['slurmdbd']}", "SlurmUser=root", f"PidFile={self.root / 'state' / 'slurmdbd.pid'}",
            f"LogFile={self.root / 'log' / 'slurmdbd.log'}", "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1", f"StoragePort={self.ports['mysql']}", "StorageUser=slurm",
            f"StoragePass={self.password}", f"StorageLoc={self.database}", "",
        ]))
        conf.chmod(0o600)
        # sacctmgr reaches slurmdbd with slurm.conf's accounting settings: a first slurm.conf without nodes.
        self._slurm_conf(nodes=False)
        self._daemon("slurmdbd", ["slurmdbd", "-D"])
        _wait("slurmdbd", lambda: self.run(["sacctmgr", "--noheader", "list", "cluster"], check=False).returncode == 0,
              log=self.root / "log" / "slurmdbd.log")

    def _slurm_conf(self, *, nodes: bool = True) -> None:
        host = socket.gethostname().split(".")[0]
        lines = [
            f"ClusterName={self.cluster}", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={self.ports['slurmctld']}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}", f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'state' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none", "ReturnToService=2",
            # ParallelCluster's slurm.conf: its scheduler and selection.
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            # Accounting in slurmdbd (ParallelCluster writes these from SlurmSettings.Database).
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={self.ports['slurmdbd']}", f"AccountingStoragePass={self.munge_socket}",
            "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
            # The project's: fair share and enforced accounting.
            *(f"{key}={value}" for key, value in self.settings),
        ]
        if nodes:
            lines += [f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.ports[node]} CPUs=1 "
                      "State=UNKNOWN" for node in NODES]
            lines.append(f"PartitionName={self.partition} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        self.conf.chmod(0o644)


SUDO = """#!/bin/bash
# sudo stand-in on the head node: `sudo -iu USER CMD...` runs CMD as USER (setpriv: its uid, gid and groups) in its
# home, with the environment a login shell starts with (HOME, USER, PATH, and SLURM_CONF: Slurm's profile.d sets it).
[ "$1" = -iu ] || { echo "sudo stand-in: only -iu USER CMD, not $*" >&2; exit 2; }
user="$2"; shift 2
home="$(getent passwd "$user" | cut -d: -f6)"
cd "$home" || exit 1
exec setpriv --reuid="$user" --regid="$user" --init-groups env HOME="$home" USER="$user" LOGNAME="$user" \\
  PATH="$PATH" SLURM_CONF="$SLURM_CONF" "$@"
"""


class HeadNodeShell:
    """The head node SSM Run Command reaches (tests/support/ssm_host.py's ``serve_run_command`` takes it): a script
    runs as root in the cluster's namespace, ``sudo -iu USER`` switches to USER for real."""

    def __init__(self, slurm: LocalSlurm) -> None:
        self.slurm = slurm
        self.ran: list[str] = []
        sudo = slurm.root / "bin" / "sudo"
        sudo.write_text(SUDO)
        sudo.chmod(0o755)

    def run(self, script: str) -> tuple[int, str, str]:
        self.ran.append(script)
        done = self.slurm.run(["sh", "-c", script], check=False, timeout=120)
        return done.returncode, done.stdout, done.stderr
