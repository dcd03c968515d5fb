"""Network namespaces standing for machines, for the partition drills.

NetLab makes one namespace per host (`PREFIX-NAME`) plus one holding a
Linux bridge (`PREFIX-br`); every host namespace gets a veth pair whose
other end is a port of that bridge, and the root namespace gets one too, so
that mounts started normally reach every host. Addresses are 10.213.N.x/24
with N chosen so that no address or route of this machine is in the way.

    lab = NetLab(["w", "a", "b"])   # hosts
    lab.ip("a")                     # "10.213.N.11"
    lab.wrap("a", argv)             # argv run inside a's network namespace
    lab.cut("a") / lab.heal("a")    # a's bridge port down / up
    lab.destroy()                   # everything gone, also after a failure

Every name starts with a random per-lab prefix (interface names stay within
the 15 characters Linux allows). destroy() is registered with atexit too,
so a crashed run leaves nothing behind; it must only run after the
processes started inside the namespaces have been stopped (a namespace
lives on while a process is in it).
"""

import atexit
import ipaddress
import random
import subprocess

HOST_OFFSET = 10  # host i gets .10 + i; the root namespace gets .100


def _run(argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _taken_subnets():
    """Third octets of 10.213.x.0/24 that an address or route already uses."""
    out = _run(["ip", "-4", "-o", "addr"]).stdout + _run(["ip", "-4", "route"]).stdout
    taken = set()
    for word in out.split():
        try:
            net = ipaddress.ip_network(word, strict=False)
        except ValueError:
            continue
        if net.overlaps(ipaddress.ip_network("10.213.0.0/16")):
            if net.prefixlen < 24:
                return set(range(256))
            taken.add(int(str(net.network_address).split(".")[2]))
    return taken


class NetLab:
    def __init__(self, hosts):
        self.prefix = "gf%04x" % random.randrange(0x10000)
        free = [n for n in range(1, 255) if n not in _taken_subnets()]
        if not free:
            raise RuntimeError("no free 10.213.N.0/24 subnet for the test network")
        self.subnet = random.choice(free)
        self.hosts = list(hosts)
        assert all(len(h) == 1 and h != "r" for h in self.hosts), "hosts are one letter, not r"
        self.bridge_ns = f"{self.prefix}-br"
        self._made_ns = []
        self._made_links = []  # root-namespace links
        self._destroyed = False
        atexit.register(self.destroy)
        try:
            self._build()
        except Exception:
            self.destroy()
            raise

    # --- names and addresses ------------------------------------------------------

    def ns(self, host):
        return f"{self.prefix}-{host}"

    def _dev(self, host, end):
        """A host's veth: end 0 lives in its namespace (the root namespace's
        is called "r"), end 1 is its bridge port."""
        return f"{self.prefix}{'r' if host == 'root' else host}{end}"

    def ip(self, host):
        if host == "root":
            return f"10.213.{self.subnet}.100"
        return f"10.213.{self.subnet}.{HOST_OFFSET + self.hosts.index(host)}"

    def wrap(self, host, argv):
        """argv run inside host's network namespace. nsenter changes only the
        network namespace, so the process sees this machine's mounts (and a
        FUSE mount it makes is visible from here)."""
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", *argv]

    # --- building and cutting -----------------------------------------------------

    def _add_ns(self, name):
        _run(["ip", "netns", "add", name])
        self._made_ns.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self):
        br = f"{self.prefix}br0"
        self._add_ns(self.bridge_ns)
        _run(["ip", "-n", self.bridge_ns, "link", "add", br, "type", "bridge"])
        _run(["ip", "-n", self.bridge_ns, "link", "set", br, "up"])
        for host in self.hosts + ["root"]:
            inner, port = self._dev(host, 0), self._dev(host, 1)
            _run(["ip", "link", "add", inner, "type", "veth", "peer", "name", port])
            self._made_links.append(inner)
            _run(["ip", "link", "set", port, "netns", self.bridge_ns])
            _run(["ip", "-n", self.bridge_ns, "link", "set", port, "master", br, "up"])
            if host == "root":
                _run(["ip", "addr", "add", f"{self.ip(host)}/24", "dev", inner])
                _run(["ip", "link", "set", inner, "up"])
            else:
                self._add_ns(self.ns(host))
                _run(["ip", "link", "set", inner, "netns", self.ns(host)])
                _run(["ip", "-n", self.ns(host), "addr", "add", f"{self.ip(host)}/24", "dev",
                      inner])
                _run(["ip", "-n", self.ns(host), "link", "set", inner, "up"])

    def cut(self, host):
        """Takes host's bridge port down: it reaches nobody, nobody reaches it
        (its own address stays up inside its namespace)."""
        _run(["ip", "-n", self.bridge_ns, "link", "set", self._dev(host, 1), "down"])

    def heal(self, host):
        _run(["ip", "-n", self.bridge_ns, "link", "set", self._dev(host, 1), "up"])

    def destroy(self):
        """Deletes every namespace and link this lab made. Never raises."""
        if self._destroyed:
            return
        self._destroyed = True
        for link in self._made_links:
            # Most are gone with their namespace; the root namespace's is not.
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for name in reversed(self._made_ns):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)

    def leftovers(self):
        """Namespaces and root links of this lab that still exist."""
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            timeout=30).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                               timeout=30).stdout
        return ([n for n in ns.split() if n.startswith(self.prefix)] +
                [w.split("@")[0] for w in links.split() if w.startswith(self.prefix)])

