"""Several "hosts" on one machine, for real: Linux network namespaces with their own hostnames, joined by veth pairs
on a private bridge, with interface names that are not eth0 (and differ between the hosts). The kernel (the test
process) stays in the root namespace, on the bridge's address.

Shared by tests/cluster/test_multi_host*.py, bench/multi_host.py and tests/support/slurm_nodes.py (with a third,
head host). Everything made here is removed by `teardown()`: every process left in the namespaces, the namespaces,
their /etc/netns files, the veths, the bridge and the CPU cgroup.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

BRIDGE, KERNEL_ADDRESS = "jdlbr0", "10.77.0.1"
HOSTS = [  # namespace, hostname, interface name inside, address
    ("jdl-ns-a", "jdl-host-a", "ens5", "10.77.0.2"),
    ("jdl-ns-b", "jdl-host-b", "enp3s0", "10.77.0.3"),
]
# A third host for a service the others share (Slurm's controller, tests/support/slurm_nodes.py); made only when
# asked for, and always torn down (a killed run may have left it).
HEAD = ("jdl-ns-head", "jdl-head", "ens6", "10.77.0.4")
ALL_HOSTS = [*HOSTS, HEAD]  # a host's veth is named by its position here, so HOSTS keep theirs
SLOW_CGROUP = "/sys/fs/cgroup/cpu/jdl-slow-host"  # cgroup v1 cpu controller, as on this machine


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def unavailable() -> str:
    """Why namespaces cannot be made here, or ''."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        return "network namespaces need root and iproute2/util-linux"
    return ""


def make(hosts=HOSTS):
    """The bridge and one namespace per host (HOSTS, or these of ALL_HOSTS). Raises CalledProcessError where the
    kernel forbids namespaces."""
    teardown()  # what a killed earlier run left
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{KERNEL_ADDRESS}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for host in hosts:
        namespace, _, interface, address = host
        index = ALL_HOSTS.index(host)
        outside = f"jdl-veth{index}"
        sh("ip", "netns", "add", namespace)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", f"jdl-tmp{index}")
        sh("ip", "link", "set", f"jdl-tmp{index}", "netns", namespace)
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", f"jdl-tmp{index}", "name", interface)
        sh("ip", "link", "set", outside, "master", BRIDGE)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{address}/24", "dev", interface)
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", interface, "up")
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        # Hosts resolve each other's names, as on a real network (`ip netns exec` mounts this over /etc/hosts);
        # gloo crashes where a host cannot resolve its own name.
        os.makedirs(f"/etc/netns/{namespace}", exist_ok=True)
        with open(f"/etc/netns/{namespace}/hosts", "w") as names:
            names.write("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for _, h, _, a in hosts))


def teardown():
    """Remove everything make() and the helpers below made; safe to call at any point, and twice."""
    for namespace, *_ in ALL_HOSTS:
        kill_processes_in(namespace)
        sh("ip", "netns", "del", namespace, check=False)
        shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)
    for index in range(len(ALL_HOSTS)):
        sh("ip", "link", "del", f"jdl-veth{index}", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    remove_cgroup()


@contextlib.contextmanager
def hosts(head=False):
    """make() ... teardown(), or pytest.skip where the kernel forbids namespaces; yields HOSTS (with head, HEAD is
    made too)."""
    import pytest

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    try:
        make(ALL_HOSTS if head else HOSTS)
    except subprocess.CalledProcessError as exc:
        teardown()
        pytest.skip(f"this kernel forbids creating network namespaces here: {exc.stderr.strip()}")
    try:
        yield HOSTS
    finally:
        teardown()


def kill_processes_in(namespace):
    """SIGKILL every process in the namespace (engines, sshd and what it started): only ours live there."""
    found = sh("ip", "netns", "pids", namespace, check=False).stdout.split()
    for pid in found:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    end = time.monotonic() + 10
    while found and time.monotonic() < end and sh("ip", "netns", "pids", namespace, check=False).stdout.split():
        time.sleep(0.05)


def in_host(namespace, hostname, argv):
    """argv run as on that host: in its network namespace, under its own hostname (a UTS namespace of its own)."""
    return [
        "ip",
        "netns",
        "exec",
        namespace,
        "unshare",
        "--uts",
        "sh",
        "-c",
        f'hostname {hostname} && exec "$@"',
        "sh",
        *argv,
    ]


def start_engines(namespace, hostname, engine_file, count, logs):
    """`count` ipyparallel engines on that host, registering with the controller in `engine_file`."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return [
        subprocess.Popen(
            in_host(
                namespace,
                hostname,
                [sys.executable, "-m", "ipyparallel.engine", f"--file={engine_file}", "--log-level=40"],
            ),
            env=env,
            stdout=logs,
            stderr=subprocess.STDOUT,
        )
        for _ in range(count)
    ]


def wait_for_engines(client, count, processes, timeout=120):
    deadline = time.monotonic() + timeout
    while len(client.ids) < count:
        assert time.monotonic() < deadline, f"only {len(client.ids)} of {count} engines in the namespaces registered"
        assert all(p.poll() is None for p in processes), "an engine in a namespace exited"
        time.sleep(0.2)


class EnginesOnHosts:
    """An ipyparallel controller on the bridge and `per_host` engines in each of HOSTS' namespaces (made already, by
    hosts() or make()); `cluster_file` is what a client (Session.cluster.connect_file) connects with. restore() brings
    a host whose link was cut back with fresh engines."""

    def __init__(self, logs, per_host=2, heartbeat_misses=None):
        import ipyparallel as ipp

        self.logs, self.per_host, self.processes = logs, per_host, []
        # (None: ipyparallel's 10 missed 3 s beats before the controller drops a silent engine)
        misses = [f"--HeartMonitor.max_heartmonitor_misses={heartbeat_misses}"] if heartbeat_misses else []
        self.cluster = ipp.Cluster(
            n=0,
            controller_args=misses,
            controller_ip=KERNEL_ADDRESS,
            controller_location=KERNEL_ADDRESS,
            log_level=40,
            cluster_id=f"jdl-multihost-{os.getpid()}",
        )

    def __enter__(self):
        try:
            self.cluster.start_controller_sync()
            self.engine_file = os.path.join(
                self.cluster.profile_dir, "security", f"ipcontroller-{self.cluster.cluster_id}-engine.json"
            )
            for namespace, hostname, *_ in HOSTS:
                self.processes += start_engines(namespace, hostname, self.engine_file, self.per_host, self.logs)
            client = self.cluster.connect_client_sync()
            wait_for_engines(client, self.per_host * len(HOSTS), self.processes)
            client.close()
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def cluster_file(self):
        return self.cluster.cluster_file

    def restore(self, index, timeout=120):
        """After a cut: the host's old engines killed while its link is still down (back on the bridge, a silent
        engine the controller has not yet dropped would reconnect beside its replacement), the link up, and new
        engines, waited for until every engine of every host answers."""
        namespace, hostname, *_ = HOSTS[index]
        kill_processes_in(namespace)
        set_link(index, up=True)
        self.processes += start_engines(namespace, hostname, self.engine_file, self.per_host, self.logs)
        wanted = sorted(h for _, h, *_ in HOSTS for _ in range(self.per_host))
        client = self.cluster.connect_client_sync()
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    found = client[:].apply_sync(socket.gethostname) if len(client.ids) == len(wanted) else []
                except Exception:  # a dead engine not yet dropped by the controller
                    found = []
                if sorted(found) == wanted:
                    return
                assert time.monotonic() < deadline, f"host {hostname}'s new engines did not take over: {client.ids}"
                time.sleep(0.5)
        finally:
            client.close()

    def __exit__(self, *_):
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait(10)
        self.processes.clear()
        self.cluster.stop_cluster_sync()


def set_link(index, up):
    """Connect (or cut) host `index` from the bridge: its veth's outer end goes up or down."""
    sh("ip", "link", "set", f"jdl-veth{index}", "up" if up else "down")


def cut_link_when(marker, index=None, timeout=300):
    """Cut host `index`'s link as soon as file `marker` exists (a job's cell writes it once it trains), from a thread;
    without an index, the host the marker names (the cell writes its rank's hostname). Returns (the started thread,
    a dict whose "t" is time.monotonic() at the cut and "index" the host cut)."""
    import threading

    cut: dict = {}
    names = [hostname for _, hostname, *_ in HOSTS]

    def when_marked():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(marker) as f:
                    named = f.read().strip()
            except OSError:
                time.sleep(0.05)
                continue
            if index is not None or named in names:
                cut["t"], cut["index"] = time.monotonic(), index if index is not None else names.index(named)
                set_link(cut["index"], up=False)
                return
            time.sleep(0.05)  # (written, not yet flushed)

    thread = threading.Thread(target=when_marked, daemon=True)
    thread.start()
    return thread, cut


# ------------------------------------------------------------------------------------------------ a slow host
def slow_down(namespace, cpu_share):
    """Every process on that host gets at most `cpu_share` of one CPU between them (a CFS quota): a host as many
    times slower as the share is small, whatever else the machine runs."""
    os.makedirs(SLOW_CGROUP, exist_ok=True)
    period = 10_000  # short periods: the quota throttles every step alike, not one in ten
    with open(os.path.join(SLOW_CGROUP, "cpu.cfs_period_us"), "w") as f:
        f.write(str(period))
    with open(os.path.join(SLOW_CGROUP, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(int(period * cpu_share)))
    for pid in sh("ip", "netns", "pids", namespace).stdout.split():
        with contextlib.suppress(OSError), open(os.path.join(SLOW_CGROUP, "cgroup.procs"), "w") as f:
            f.write(pid)


def remove_cgroup():
    """Move what is still in the slow cgroup back to the root one, then remove it."""
    if not os.path.isdir(SLOW_CGROUP):
        return
    with open(os.path.join(SLOW_CGROUP, "cgroup.procs")) as f:
        left = f.read().split()
    for pid in left:
        with contextlib.suppress(OSError), open(os.path.join(os.path.dirname(SLOW_CGROUP), "cgroup.procs"), "w") as f:
            f.write(pid)
    with contextlib.suppress(OSError):
        os.rmdir(SLOW_CGROUP)


# ------------------------------------------------------------------------------------------------------ sshd
SSHD_CONFIG = """ListenAddress {address}
Port 22
HostKey {workdir}/host_key
AuthorizedKeysFile {workdir}/client_key.pub
PidFile {workdir}/sshd-{hostname}.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
"""


def ssh_keys(workdir):
    """A host key for the sshds and a client key the test logs in with (both made here, in workdir)."""
    for name in ("host_key", "client_key"):
        sh(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"jupyter-dl-test-{name}",
            "-f",
            os.path.join(workdir, name),
        )
    return os.path.join(workdir, "client_key")


def ssh_options(client_key):
    """ssh/scp arguments that log in with the test's key, without touching the user's known_hosts."""
    return [
        "-i",
        client_key,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ConnectTimeout=5",
    ]


def start_sshd(namespace, hostname, address, workdir, logs):
    """Debian's sshd on that host (its namespace and hostname), in the foreground so the test owns its pid."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    config = os.path.join(workdir, f"sshd-{hostname}.conf")
    with open(config, "w") as f:
        f.write(SSHD_CONFIG.format(address=address, workdir=workdir, hostname=hostname))
    return subprocess.Popen(
        in_host(namespace, hostname, [sshd, "-D", "-e", "-f", config]), stdout=logs, stderr=subprocess.STDOUT
    )


def wait_for_ssh(address, client_key, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        done = sh("ssh", *ssh_options(client_key), f"root@{address}", "hostname", check=False)
        if done.returncode == 0:
            return done.stdout.strip()
        assert time.monotonic() < deadline, f"sshd at {address} never answered: {done.stderr.strip()}"
        time.sleep(0.3)
