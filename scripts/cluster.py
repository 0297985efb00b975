#!/usr/bin/env python3
"""An emulated cluster on one Linux machine: N nodes, each a network namespace.

Each node is a network namespace ``minidl-NAME-nodeI`` with its own hostname
(``unshare --uts`` around every command run on it), its own ``/etc/hosts``
(``ip netns exec`` bind-mounts ``/etc/netns/NS/hosts``), its own local disk and
``/dev/shm`` (bind mounts of folders that ``down`` removes) and one interface
``eth0`` with address 198.18.0.(10+I)/24 (RFC 2544's benchmarking range),
joined to the others by a veth pair into a bridge in a switch namespace
``minidl-NAME-switch``. Traffic between nodes leaves the root namespace
untouched. ``--rate`` caps every link in both directions with ``tc tbf``;
there is no latency emulation (this kernel has no ``netem``).

MPI jobs start on node0, as from a login node, and reach the other nodes
through a generated launch agent that plays ssh: it drops ssh's options and
runs the command on the named node. MPICH: ``-launcher ssh -launcher-exec
AGENT -hosts ...`` with ``UCX_TLS=tcp,self`` (otherwise its UCX transport
finds shared memory across the namespaces); Open MPI: ``--mca plm_rsh_agent
AGENT`` with the TCP BTL on ``eth0``. Ranks on one node share memory as on a
real node.

A command run on a node with ``exec`` finds the other nodes as on a cluster with ssh
(``ssh`` on its ``PATH`` is the agent) and MPI set to use the links (``node_env``), so a
real cluster's ``mpiexec -hosts ...`` runs as written. ``up --slurm`` adds SLURM: munge,
slurmctld on node0 and slurmd on every node (``start_slurm``), so ``salloc``, ``srun`` and
``sbatch`` run on node0 as on a login node.

Needs root and iproute2 (and for ``--slurm``, Debian's slurm-wlm, munge and libpmix-dev).
Command line (``python scripts/cluster.py -h``)::

    up --nodes 2 [--rate 1gbit] [--slurm] [--name NAME]   bring a cluster up
    mpirun --name NAME --ppn 2 [--mpi openmpi] -- python -m minidl train ...
    exec --name NAME node0 -- COMMAND             run a command on one node (as its login)
    link --name NAME node1 down|up                cut or restore a node's link
    kill --name NAME node1 [--command TEXT]       kill every process of a node (or its ranks)
    down --name NAME | down --stale | down --all  tear down
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

PREFIX = "minidl-"
STATE_DIR = "/run/minidl-cluster"
SUBNET = "198.18.0"
FIRST_HOST = 10
KILL_WAIT_S = 5.0
TCP_RETRIES = 5  # Linux's default 15 (~15 min) would keep a launcher waiting for a lost node


RATE_UNITS = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}

# (environment, launcher flags) that keep the other ranks running when one dies, so that
# minidl names it (docs/cluster.md, When a node fails): MPICH's OFI netmod over TCP (with
# UCX over TCP the survivor segfaults), Open MPI's fault-tolerant MPI (ULFM)
KEEP_SURVIVORS = {
    "mpich": ({"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}, ["-disable-auto-cleanup"]),
    "openmpi": ({}, ["--with-ft", "ulfm"]),
}


# MPICH's setting for the emulated links: UCX over TCP (else it finds the namespaces' shared
# memory and no byte crosses the links)
MPICH_ENV = {"UCX_TLS": "tcp,self"}
# Open MPI's settings for the emulated links: TCP on eth0 between nodes, shared memory
# within one; waiting ranks yield their core (the nodes share this machine's cores)
OPENMPI_MCA = {
    "pml": "ob1",
    "btl": "tcp,sm,self",
    "btl_tcp_if_include": "eth0",
    "oob_tcp_if_include": "eth0",
    "mpi_yield_when_idle": "1",
}
OPENMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
SLURM_PACKAGES = "slurm-wlm munge libpmix-dev"  # Debian's, for `up --slurm`
SLURM_START_S = 30.0  # how long the daemons may take to report every node idle


def rate_bits(rate):
    """Bits per second of a ``tc`` rate such as ``1gbit`` or ``200mbit``."""
    for unit, scale in RATE_UNITS.items():
        if rate.endswith(unit) and rate[: -len(unit)].replace(".", "", 1).isdigit():
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"cluster: rate {rate!r} must be a number and gbit, mbit, kbit or bit")


def unavailable_reason():
    """Why an emulated cluster cannot be built here (None when it can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root (network namespaces and veth links)"
    for tool in ("ip", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2, util-linux) on PATH"
    return None


def slurm_unavailable_reason():
    """Why ``up --slurm`` cannot work here (None when it can)."""
    for tool in ("munged", "slurmctld", "slurmd", "srun"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` on PATH (Debian: apt-get install {SLURM_PACKAGES})"
    return None


def _sh(*argv, check=True, env=None):
    """Run a system command quietly; on failure raise with its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise RuntimeError(f"cluster: `{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done.stdout


def _daemon(argv):
    """Start a daemon that forks into the background (its output goes to its log, not to a
    pipe that would stay open); raise if its start fails."""
    code = subprocess.call(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if code != 0:
        raise RuntimeError(f"cluster: `{' '.join(argv)}` failed (exit status {code})")


def _namespaces():
    """Names of the network namespaces that exist now."""
    return [line.split()[0] for line in _sh("ip", "netns", "list").splitlines() if line.strip()]


def _pid_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone already
        return ""


def _kill_namespace_processes(namespace, command=None):
    """SIGKILL every process in ``namespace`` (only those whose command line contains
    ``command`` if given); wait (``KILL_WAIT_S`` at most) for them to go."""
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        pids = [int(p) for p in _sh("ip", "netns", "pids", namespace, check=False).split()]
        if command is not None:
            pids = [pid for pid in pids if command in _command_line(pid)]
        if not pids or time.monotonic() > deadline:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _remove_namespace(namespace):
    _kill_namespace_processes(namespace)
    _sh("ip", "netns", "del", namespace, check=False)
    shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)


AGENT = """#!/bin/sh
# Launch agent of the emulated cluster {name}: called as `ssh [options] HOST COMMAND...`,
# it runs COMMAND on HOST's namespace with HOST as hostname, as ssh would on a real node.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
case "$host" in
{cases}
  *) echo "cluster {name}: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "{prefix}$host" unshare --uts sh -c \\
  '{enter} && exec sh -c "$*"' \\
  sh "$host" "{disks}/$host" "{local}" "{shm}/$host" "$@"
"""


# a node's hostname, its local disk ($2 seen at $3) and its own /dev/shm ($4): MPI's
# shared-memory segments stay on their node and go with the cluster, as on real nodes
ENTER_NODE = 'hostname "$1" && mount --bind "$2" "$3" && mount --bind "$4" /dev/shm && shift 4'


SLURM_CONF = """# SLURM on the emulated cluster {name} (scripts/cluster.py); node0 leads
ClusterName=minidl
SlurmctldHost=node0({controller})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
StateSaveLocation={folder}
SlurmdSpoolDir={folder}/spool-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
# each node's own temporary folder (PMIx makes one per job step in it)
TmpFS={local}/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
# a step's tasks get SIGKILL 5 s after SIGTERM, and srun waits as long for a lost node's
KillWait=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
SLURM_NODE = "NodeName={node} NodeAddr={address} CPUs={cpus} State=UNKNOWN"
SLURM_CPUS = 4  # slots per emulated node
# slurmd needs cgroup (v1) hierarchies at /sys/fs/cgroup, which `ip netns exec` hides
SLURMD = (
    "mount -t tmpfs cgroup /sys/fs/cgroup && for c in freezer cpuset memory devices; do "
    "mkdir /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c; done && "
    'exec slurmd -f "$0" -N "$1"'
)


class Cluster:
    """N emulated nodes; ``with Cluster(2) as c: c.mpirun(["python", ...], ppn=2)``.

    ``rate``: a ``tc`` rate (``"1gbit"``) for every link, None for unlimited.
    ``name``: a short word naming this cluster (default: ``c`` and this process id),
    so several clusters can coexist. ``down()`` removes everything ``up()`` made, and
    ``down_stale()`` what clusters of processes that died left behind.
    """

    def __init__(self, nodes, rate=None, name=None):
        if nodes < 1:
            raise ValueError(f"cluster: nodes must be >= 1, got {nodes}")
        self.nodes = [f"node{i}" for i in range(nodes)]
        self.rate = rate
        self.name = name or f"c{os.getpid()}"
        if not self.name.isalnum():
            raise ValueError(f"cluster: name {self.name!r} must be letters and digits only")
        self.prefix = f"{PREFIX}{self.name}-"
        self.state = os.path.join(STATE_DIR, self.name)
        self.agent = os.path.join(self.state, "agent")
        self.bin = os.path.join(self.state, "bin")  # ``ssh``: the agent, for node_env's PATH
        self.slurm = os.path.join(self.state, "slurm")  # SLURM's configuration and state
        # every node sees its own disk, self.disks/NODE, at the path self.local, and its
        # own self.shm/NODE at /dev/shm (self.shm: a tmpfs, as /dev/shm is)
        self.disks, self.local = (
            os.path.join(self.state, "disks"),
            os.path.join(self.state, "local"),
        )
        self.shm = os.path.join(self.state, "shm")

    # -- naming --------------------------------------------------------------------------
    def namespace(self, node):
        return f"{self.prefix}{node}"

    def disk(self, node):
        """The folder that is ``node``'s local disk (seen on the node at ``self.local``)."""
        return os.path.join(self.disks, node)

    def address(self, node):
        return f"{SUBNET}.{FIRST_HOST + self.nodes.index(node)}"

    @property
    def switch(self):
        return f"{self.prefix}switch"

    # -- life cycle ----------------------------------------------------------------------
    def up(self, keep=False, owner=None):
        """Build the nodes. ``keep``: the cluster outlives this process (the command line's
        ``up``); otherwise ``down_stale`` may remove it once ``owner`` (this process by
        default) is gone."""
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"cluster: {reason}")
        if os.path.exists(self.state) or self.switch in _namespaces():
            raise RuntimeError(
                f"cluster {self.name} exists already: `python scripts/cluster.py down "
                f"--name {self.name}` first"
            )
        os.makedirs(self.state)
        with open(os.path.join(self.state, "cluster.json"), "w") as f:
            json.dump(
                {
                    "nodes": len(self.nodes),
                    "rate": self.rate,
                    "owner": owner or os.getpid(),
                    "keep": keep,
                },
                f,
            )
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self):
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(n)} {n}\n" for n in self.nodes)
        os.makedirs(self.local)
        os.makedirs(self.shm)
        _sh("mount", "-t", "tmpfs", "-o", "mode=1777", f"{self.prefix}shm", self.shm)
        _sh("ip", "netns", "add", self.switch)
        _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, node in enumerate(self.nodes):
            ns, port = self.namespace(node), f"port{i}"
            _sh("ip", "netns", "add", ns)
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            os.makedirs(self.disk(node))
            os.makedirs(os.path.join(self.shm, node))
            os.chmod(os.path.join(self.shm, node), 0o1777)  # as /dev/shm: anyone, sticky
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts)
            _sh(*f"ip -n {self.switch} link add {port} type veth peer name eth0 netns {ns}".split())
            _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            # a connection to a lost node fails after ~10 s of retransmissions, not ~15 min
            _sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_retries2={TCP_RETRIES}")
            if self.rate:
                self.set_rate(node, self.rate)
        cases = "\n".join(f"  {n}) ;;" for n in self.nodes)
        with open(self.agent, "w") as f:
            f.write(
                AGENT.format(
                    name=self.name,
                    cases=cases,
                    prefix=self.prefix,
                    disks=self.disks,
                    local=self.local,
                    shm=self.shm,
                    enter=ENTER_NODE,
                )
            )
        os.chmod(self.agent, 0o755)
        os.makedirs(self.bin)
        os.symlink(self.agent, os.path.join(self.bin, "ssh"))

    def down(self):
        """Kill every process on the nodes, remove the namespaces, links and files."""
        for ns in _namespaces():
            if ns.startswith(self.prefix):
                _remove_namespace(ns)
        if os.path.ismount(self.shm):
            _sh("umount", "--lazy", self.shm, check=False)
        shutil.rmtree(self.state, ignore_errors=True)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    def start_slurm(self):
        """SLURM on the nodes: munge and slurmctld on node0, slurmd on every node, configured
        in ``self.slurm`` (``node_env`` names it in SLURM_CONF); returns once every node is
        idle. The daemons live in the nodes' namespaces, so ``down`` ends them."""
        reason = slurm_unavailable_reason()
        if reason:
            raise RuntimeError(f"cluster: {reason}")
        folder, conf = self.slurm, os.path.join(self.slurm, "slurm.conf")
        os.makedirs(folder)
        nodes = [
            SLURM_NODE.format(node=n, address=self.address(n), cpus=SLURM_CPUS) for n in self.nodes
        ]
        with open(conf, "w") as f:
            controller = self.address(self.nodes[0])
            f.write(
                SLURM_CONF.format(
                    name=self.name,
                    controller=controller,
                    folder=folder,
                    local=self.local,
                    nodes="\n".join(nodes),
                )
            )
        with open(os.path.join(folder, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\n")
        key = os.path.join(folder, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as f:
            f.write(os.urandom(1024))
        for node in self.nodes:
            os.makedirs(os.path.join(folder, f"spool-{node}"))
            os.makedirs(os.path.join(self.disk(node), "tmp"))
        munged = [
            "munged",
            "--force",
            f"--socket={folder}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/munged.log",
            f"--seed-file={folder}/munged.seed",
        ]
        _daemon(self.on(self.nodes[0], munged))
        _daemon(self.on(self.nodes[0], ["slurmctld", "-f", conf]))
        for node in self.nodes:
            _daemon(self.on(node, ["sh", "-c", SLURMD, conf, node]))
        deadline, states = time.monotonic() + SLURM_START_S, []
        while time.monotonic() < deadline:
            states = _sh(
                *self.on(self.nodes[0], ["sinfo", "-h", "-N", "-o", "%t"]),
                check=False,
                env={**os.environ, "SLURM_CONF": conf},
            ).split()
            if len(states) == len(self.nodes) and set(states) == {"idle"}:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"cluster: SLURM's nodes were not idle after {SLURM_START_S:.0f} s (sinfo: "
            f"{' '.join(states) or 'no answer'}); its logs are in {folder}"
        )

    def node_env(self):
        """The environment of a command on a node, as on a cluster's login node: ``ssh``
        reaches the other nodes (the agent, first on PATH), SLURM_CONF names the cluster's
        SLURM (``start_slurm``), and MPI uses the links (MPICH's UCX over TCP, Open MPI's
        ``OPENMPI_MCA``), as a real cluster's MPI configuration would say."""
        env = {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            **MPICH_ENV,
            **OPENMPI_ROOT,
            **{f"OMPI_MCA_{key}": value for key, value in OPENMPI_MCA.items()},
        }
        if os.path.isdir(self.slurm):
            env["SLURM_CONF"] = os.path.join(self.slurm, "slurm.conf")
        return env

    # -- faults and links ----------------------------------------------------------------
    def set_rate(self, node, rate):
        """Cap ``node``'s link at ``rate`` both ways (token bucket; ``None``: unlimited).

        The bucket holds 1 ms of traffic (32 KiB at least): measured here, TCP then gets
        95-97% of the rate at 1 and 10 Gbit/s (93% with 0.2 ms), while a bucket of 10 ms
        let messages of up to 1.25 MB through a 1 Gbit/s link at once, so that a ping-pong
        fit found the link 1.8-2x faster than it is."""
        i = self.nodes.index(node)
        burst = max(32 * 1024, int(rate_bits(rate) / 8 / 1000)) if rate else 0
        for ns, dev in ((self.namespace(node), "eth0"), (self.switch, f"port{i}")):
            _sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            if rate:
                tbf = f"tbf rate {rate} burst {burst} latency 100ms"
                _sh(*f"tc -n {ns} qdisc add dev {dev} root {tbf}".split())

    def link(self, node, state):
        """Cut (``"down"``) or restore (``"up"``) ``node``'s link to the switch."""
        if state not in ("up", "down"):
            raise ValueError(f"cluster: link state must be 'up' or 'down', got {state!r}")
        _sh("ip", "-n", self.namespace(node), "link", "set", "eth0", state)

    def kill(self, node, command=None):
        """SIGKILL every process running on ``node`` (a node that dies), or only those whose
        command line contains ``command`` (ranks that die while the launcher's process lives)."""
        return _kill_namespace_processes(self.namespace(node), command)

    def kill_jobs(self):
        """SIGKILL every process on every node (what a finished or killed job left behind)."""
        for node in self.nodes:
            self.kill(node)

    # -- running -------------------------------------------------------------------------
    def on(self, node, argv):
        """The argv that runs ``argv`` on ``node``, with its hostname, local disk and /dev/shm."""
        enter = ["ip", "netns", "exec", self.namespace(node), "unshare", "--uts"]
        shm = os.path.join(self.shm, node)
        script = f'{ENTER_NODE} && exec "$@"'
        return [*enter, "sh", "-c", script, "sh", node, self.disk(node), self.local, shm, *argv]

    def mpiexec(self, ranks, mpi="mpich", mpiexec="mpiexec", flags=()):
        """(argv, environment) of ``mpiexec`` from node0 placing ``ranks[i]`` ranks on node i.

        ``ranks``: a list of counts per node (ranks are numbered node by node; a node
        with 0 gets none, but node0 still runs ``mpiexec``), or one count for every node.
        ``flags``: more launcher options (``-disable-auto-cleanup``), put first.
        """
        if isinstance(ranks, int):
            ranks = [ranks] * len(self.nodes)
        if len(ranks) > len(self.nodes) or min(ranks) < 0 or sum(ranks) < 1:
            raise ValueError(
                f"cluster: ranks per node {ranks} must be >= 0 each, some > 0, for at "
                f"most {len(self.nodes)} nodes"
            )
        hosts = ",".join(f"{n}:{r}" for n, r in zip(self.nodes, ranks) if r)
        total = str(sum(ranks))
        if mpi == "mpich":
            argv = [mpiexec, *flags, "-launcher", "ssh", "-launcher-exec", self.agent]
            argv += ["-hosts", hosts, "-n", total]
            return argv, dict(MPICH_ENV)
        if mpi == "openmpi":
            argv = [mpiexec, *flags, "--mca", "plm_rsh_agent", self.agent]
            # the emulated nodes share this machine's cores, so a waiting rank must yield its
            # core (spinning made jobs ~4x slower)
            argv += ["--host", hosts, "-n", total, "--bind-to", "none"]
            argv += [arg for key, value in OPENMPI_MCA.items() for arg in ("--mca", key, value)]
            # notice a lost node's daemon in ~8 s, not the default 480 s
            for key, value in (("time", "5"), ("intvl", "1"), ("probes", "3")):
                argv += ["--prtemca", f"oob_tcp_keepalive_{key}", value]
            return argv, dict(OPENMPI_ROOT)
        raise ValueError(f"cluster: mpi must be 'mpich' or 'openmpi', got {mpi!r}")

    def start(self, argv, ranks, mpi="mpich", mpiexec="mpiexec", env=None, flags=()):
        """Start ``mpiexec ... argv`` on node0 in its own session; returns the ``Popen``."""
        prefix, mpi_env = self.mpiexec(ranks, mpi, mpiexec, flags)
        return subprocess.Popen(
            self.on(self.nodes[0], [*prefix, *argv]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **mpi_env, **(env or {})},
            text=True,
            start_new_session=True,
        )

    def finish(self, process, timeout):
        """Wait for a ``start``ed job; returns (exit status, output, timed out). A job past
        ``timeout`` s is killed, and every process it left on any node goes with it."""
        try:
            output, _ = process.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.kill_jobs()  # processes on other nodes hold the output pipe open
            output, _ = process.communicate()
        finally:
            self.kill_jobs()
        return process.returncode, output, timed_out

    def mpirun(self, argv, ranks, mpi="mpich", mpiexec="mpiexec", env=None, timeout=120, flags=()):
        """``start`` then ``finish``: (exit status, output, timed out)."""
        return self.finish(self.start(argv, ranks, mpi, mpiexec, env, flags), timeout)


def mpi_flavor(mpiexec):
    """``"openmpi"`` or ``"mpich"``: what ``mpiexec --version`` says it is."""
    try:
        text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    except OSError:
        raise SystemExit(f"cluster: no {mpiexec} on PATH: install MPICH or Open MPI") from None
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "mpich"


def down_stale():
    """Tear down the clusters whose owner process is gone; returns their names."""
    removed = []
    names = {ns[len(PREFIX) :].split("-")[0] for ns in _namespaces() if ns.startswith(PREFIX)}
    if os.path.isdir(STATE_DIR):
        names |= set(os.listdir(STATE_DIR))
    for name in sorted(names):
        try:
            with open(os.path.join(STATE_DIR, name, "cluster.json")) as f:
                state = json.load(f)
        except (OSError, ValueError):
            state = {}
        if not state.get("keep") and not _pid_alive(state.get("owner", 0) or 0):
            Cluster(1, name=name).down()
            removed.append(name)
    return removed


def _load(name):
    try:
        with open(os.path.join(STATE_DIR, name, "cluster.json")) as f:
            state = json.load(f)
    except OSError:
        raise SystemExit(
            f"cluster: no cluster {name!r}; bring one up with `up --name {name}`"
        ) from None
    return Cluster(state["nodes"], rate=state["rate"], name=name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="bring a cluster up (it stays up until `down`)")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--rate", help="link rate for tc, e.g. 1gbit (default: unlimited)")
    up.add_argument("--name", default="demo")
    up.add_argument("--slurm", action="store_true", help="run SLURM on the nodes (node0 leads)")
    run = sub.add_parser("mpirun", help="run an MPI job started on node0")
    run.add_argument("--ppn", default="1", help="ranks per node: 2, or one count per node: 1,2")
    run.add_argument(
        "--mpi",
        choices=("auto", "mpich", "openmpi"),
        default="auto",
        help="auto: the kind of the mpiexec on PATH",
    )
    run.add_argument("--timeout", type=float, default=3600)
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command")
    ex = sub.add_parser("exec", help="run a command on one node")
    ex.add_argument("node")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command")
    link = sub.add_parser("link", help="cut or restore a node's link")
    link.add_argument("node")
    link.add_argument("state", choices=("up", "down"))
    rate = sub.add_parser("rate", help="change a node's link rate (omit for unlimited)")
    rate.add_argument("node")
    rate.add_argument("rate", nargs="?")
    kill = sub.add_parser("kill", help="kill every process on a node")
    kill.add_argument("node")
    kill.add_argument("--command", help="only the processes whose command line contains this")
    down = sub.add_parser("down", help="tear a cluster down")
    which = down.add_mutually_exclusive_group()
    which.add_argument("--stale", action="store_true", help="the clusters of dead processes")
    which.add_argument("--all", action="store_true", help="every minidl cluster")
    for p in (run, ex, link, rate, kill, down):
        p.add_argument("--name", default="demo")
    args = parser.parse_args(argv)
    command = getattr(args, "argv", [])
    command = command[1:] if command[:1] == ["--"] else command

    if args.action == "up":
        cluster = Cluster(args.nodes, rate=args.rate, name=args.name)
        # a script or test that brings a cluster up by command names itself its owner, so
        # that down_stale removes the cluster if that process dies before its `down`
        owner = int(os.environ.get("MINIDL_CLUSTER_OWNER", 0))
        cluster.up(keep=not owner, owner=owner or None)
        if args.slurm:
            try:
                cluster.start_slurm()
            except BaseException:
                cluster.down()
                raise
        print(
            f"cluster {cluster.name}: {', '.join(cluster.nodes)}; launch agent {cluster.agent}"
            + ("; SLURM on every node" if args.slurm else "")
        )
        return 0
    if args.action == "down":
        if args.stale or args.all:
            if args.all:
                for name in os.listdir(STATE_DIR) if os.path.isdir(STATE_DIR) else []:
                    Cluster(1, name=name).down()
            print("removed:", " ".join(down_stale()) or "nothing")
        else:
            Cluster(1, name=args.name).down()
        return 0
    cluster = _load(args.name)
    if args.action == "mpirun":
        ranks = [int(r) for r in args.ppn.split(",")]
        mpi = mpi_flavor("mpiexec") if args.mpi == "auto" else args.mpi
        code, output, timed_out = cluster.mpirun(
            command, ranks[0] if len(ranks) == 1 else ranks, mpi, timeout=args.timeout
        )
        sys.stdout.write(output)
        return 124 if timed_out else code
    if args.action == "exec":
        env = {**os.environ, **cluster.node_env()}
        return subprocess.call(cluster.on(args.node, command), env=env)
    if args.action == "link":
        cluster.link(args.node, args.state)
    elif args.action == "rate":
        cluster.set_rate(args.node, args.rate)
    elif args.action == "kill":
        cluster.kill(args.node, args.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
