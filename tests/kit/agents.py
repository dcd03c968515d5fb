"""Node agents (grantfs-node) on "nodes" of a NetLab, each in a mount
namespace of its own, for the global-mount tests.

    node = AgentNode(lab, "x", "nx", servers, base)   # lab host "x", node name "nx"
    node.start()              # its namespaces, then its agent
    node.mounted(path)        # a GrantFS mount at path, as the node sees it
    node.run(["cat", f])      # a command on the node (its network and mounts)
    node.kill9_agent(); node.start_agent()
    node.destroy()            # every process of the node ended: its mounts go

A node is a process holding a mount namespace (`unshare -m`, propagation
private) inside the lab host's network namespace: `sleep`, started after it
mounted a small tmpfs of its own at `global_root` (BASE/global), so what the
node's agent creates and mounts below it exists on that node only, and is
gone with it. The agent, and every grantfs-mount it runs (they detach into
sessions of their own), live in that namespace; destroy() finds them by it
(/proc/PID/ns/mnt), so nothing outlives the test even after a kill -9 of the
agent or a failed test. Every AgentNode is destroyed at exit too.
"""

import atexit
import os
import signal
import subprocess
import time

from .build import NODE_AGENT, binary
from .errors import HarnessError
from .processes import tail_log
from .waits import wait_for

_live = set()


def _destroy_all():
    for n in list(_live):
        n.destroy()


atexit.register(_destroy_all)


def _pids_in_mount_ns(ns):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/mnt") == ns:
                out.append(int(d))
        except OSError:
            pass
    return out


class AgentNode:
    def __init__(self, lab, host, name, servers, base, build=None, extra=()):
        self.lab, self.host, self.name = lab, host, name
        self.servers = servers
        self.base = base
        self.build = build
        self.extra = list(extra)
        self.global_root = os.path.join(base, "global")
        self.state_dir = os.path.join(base, f"agent-{name}")
        self.log_path = os.path.join(base, f"agent-{name}.log")
        self.holder = None  # Popen of the process holding the namespace
        self.mnt_ns = None  # "mnt:[4026532...]"
        self.agent = None   # Popen

    # --- the node ---------------------------------------------------------------------

    def enter(self, argv):
        """argv run inside the node's network and mount namespaces."""
        return ["nsenter", f"--net=/run/netns/{self.lab.ns(self.host)}",
                f"--mount=/proc/{self.holder.pid}/ns/mnt", *argv]

    def start_node(self):
        os.makedirs(self.global_root, exist_ok=True)
        os.makedirs(self.state_dir, exist_ok=True)
        script = (f"mount -t tmpfs -o size=4m,mode=755 grantfs-test-{self.name} "
                  f"{self.global_root} && echo ready && exec sleep 100000")
        self.holder = subprocess.Popen(
            self.lab.wrap(self.host, ["unshare", "--mount", "--propagation", "private",
                                      "sh", "-c", script]),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True)
        _live.add(self)
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            raise HarnessError(f"node {self.name}: its namespace did not start: {line}"
                               f"{self.holder.stdout.read()}")
        self.mnt_ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        if self.mnt_ns == os.readlink("/proc/self/ns/mnt"):
            raise HarnessError(f"node {self.name}: no mount namespace of its own")
        return self

    def start_agent(self, extra=(), config=None):
        """The agent, with the node's servers and name as flags; with
        `config`, from that configuration file instead."""
        if config is None:
            flags = [f"--server={self.servers}", f"--node={self.name}", "--config="]
        else:
            flags = [f"--config={config}"]
        argv = [binary(NODE_AGENT, self.build), *flags, f"--state_dir={self.state_dir}",
                f"--allowed_root={self.global_root}",
                *self.extra, *extra]
        with open(self.log_path, "a") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} start: {' '.join(argv)}\n")
            log.flush()
            self.agent = subprocess.Popen(self.enter(argv), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
        return self

    def start(self):
        self.start_node()
        return self.start_agent()

    def check_agent(self):
        if self.agent is None or self.agent.poll() is not None:
            raise HarnessError(f"agent {self.name} exited "
                               f"({None if self.agent is None else self.agent.returncode}):\n"
                               f"{tail_log(self.log_path)}")
        return False

    def kill9_agent(self):
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(timeout=30)

    def stop_agent(self, timeout=15):
        """SIGTERM; the agent's exit code."""
        self.agent.terminate()
        return self.agent.wait(timeout=timeout)

    # --- what the node sees -------------------------------------------------------------

    def mountinfo(self):
        """(mount point, fstype) of each mount of the node's namespace."""
        out = []
        with open(f"/proc/{self.holder.pid}/mountinfo") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                out.append((fields[4].replace("\\040", " "), fields[sep + 1]))
        return out

    def grantfs_mounts(self, path):
        """How many GrantFS mounts are stacked at path on the node."""
        return sum(1 for p, t in self.mountinfo() if p == path and t == "fuse.grantfs")

    def mounted(self, path):
        return self.grantfs_mounts(path) > 0

    def mount_daemons(self, path):
        """Pids of the node's grantfs-mount processes serving `path`."""
        out = []
        for pid in _pids_in_mount_ns(self.mnt_ns):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"grantfs-mount") and path.encode() in argv[1:]:
                out.append(pid)
        return sorted(out)

    def run(self, argv, timeout=30, check=True):
        r = subprocess.run(self.enter(argv), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise HarnessError(f"node {self.name}: {' '.join(argv)}: exit {r.returncode}: "
                               f"{r.stdout}{r.stderr}")
        return r

    def spawn(self, argv):
        """A process on the node (ended by destroy(), as everything of the node)."""
        return subprocess.Popen(self.enter(argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_mounted(self, path, timeout=10.0, present=True):
        wait_for(lambda: self.check_agent() or self.mounted(path) == present, timeout,
                 f"node {self.name}: {path} {'mounted' if present else 'unmounted'}")

    # --- the end ------------------------------------------------------------------------

    def destroy(self):
        """Ends every process of the node's mount namespace (the agent, its
        mounts' daemons, what the test ran there, the holder): its mounts and
        its tmpfs go with it. Never raises."""
        _live.discard(self)
        if self.mnt_ns is None:
            return
        try:
            if self.agent is not None and self.agent.poll() is None:
                self.agent.terminate()
                try:
                    self.agent.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.agent.kill()
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
                pids = _pids_in_mount_ns(self.mnt_ns)
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
                deadline = time.monotonic() + wait
                while _pids_in_mount_ns(self.mnt_ns) and time.monotonic() < deadline:
                    time.sleep(0.05)
            for p in (self.agent, self.holder):
                if p is not None:
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
            if self.holder is not None and self.holder.stdout is not None:
                self.holder.stdout.close()
        except Exception:  # noqa: BLE001 - teardown goes on
            pass
        self.mnt_ns = None
