"""The local stack's Kubernetes node: containerd, dockerd, kubelet, kube-scheduler, kube-proxy
and CoreDNS, all real and all run as root on this machine.

Addresses.  Pods live on a CNI bridge (``POD_CIDR``); Services get virtual IPs from
``SERVICE_CIDR``, made real by kube-proxy's iptables rules.  The node itself has ``NODE_IP`` on an
interface of its own: the stack's servers (Kafka, the registry, S3, the API server, CoreDNS)
listen there, so the same address works from this machine and from inside a pod (the interface
is an empty bridge: this kernel has no dummy driver).  Nothing in
these ranges is routed off the machine: Service IPs that no rule rewrote end on that
interface, and pods may only talk to pods and to the node.

Privileges.  Root here has every capability but CAP_SYS_RESOURCE, so no process may lower its
OOM score: containerd restricts what pods ask for to its own score, and the kubelet keeps 0.

Cgroups.  The machine has cgroup v1 only; kubelet 1.35 refuses v1 unless its configuration says
``failCgroupV1: false``, and containerd, dockerd and the kubelet all use the ``cgroupfs`` driver
(there is no systemd here to delegate to).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import kube, paths

NODE_NAME = "floe-node"
NODE_IP = "10.250.0.1"
NODE_INTERFACE = "floe0"
BRIDGE = "floe-cni0"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DNS = NODE_IP  # CoreDNS runs on the node, next to the kubelet
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "floe.local/pause:3.10"
# A host directory pods may mount at the same path (hostPath), as kind's extraMounts: a
# file-based catalog and warehouse there read the same from this machine and from any pod.
# Not under a home directory: a pod's user could not get past an image's /root (mode 700).
SHARED_DIR = Path("/var/lib/floe/shared")
_GUARD_CHAIN = "FLOE-NODE-GUARD"
DOCKER = "/usr/bin/docker"  # Debian's client, whose `docker build` speaks BuildKit itself


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def _sysctl(key: str, value: str) -> None:
    Path("/proc/sys", *key.split(".")).write_text(value)


def shared_dir() -> Path:
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    SHARED_DIR.chmod(0o1777)  # any pod's user may add its own directory, like /tmp
    return SHARED_DIR


def network_up() -> None:
    """The node's address, forwarding and the guard rule; idempotent, needs root."""
    _sysctl("net.ipv4.ip_forward", "1")
    # Pods on one bridge reach each other through Service IPs only if bridged traffic passes
    # iptables (kube-proxy's rules).
    _sysctl("net.bridge.bridge-nf-call-iptables", "1")
    if _sh("ip", "link", "show", NODE_INTERFACE, check=False).returncode != 0:
        _sh("ip", "link", "add", NODE_INTERFACE, "type", "bridge")  # no dummy driver here
    _sh("ip", "addr", "replace", f"{NODE_IP}/32", "dev", NODE_INTERFACE)
    _sh("ip", "link", "set", NODE_INTERFACE, "up")
    _sh("ip", "route", "replace", SERVICE_CIDR, "dev", NODE_INTERFACE)
    # Pods talk to pods and to the node only: nothing they send is forwarded off the machine.
    if _sh("iptables", "-n", "-L", _GUARD_CHAIN, check=False).returncode != 0:
        _sh("iptables", "-N", _GUARD_CHAIN)
    _sh("iptables", "-F", _GUARD_CHAIN)
    _sh("iptables", "-A", _GUARD_CHAIN, "-s", POD_CIDR, "-d", POD_CIDR, "-j", "RETURN")
    _sh("iptables", "-A", _GUARD_CHAIN, "-s", POD_CIDR, "-j", "REJECT")
    if _sh("iptables", "-C", "FORWARD", "-j", _GUARD_CHAIN, check=False).returncode != 0:
        _sh("iptables", "-I", "FORWARD", "1", "-j", _GUARD_CHAIN)


# --- containerd ----------------------------------------------------------------------------


def containerd_dir() -> Path:
    return paths.RUN / "containerd"


def containerd_socket() -> Path:
    return containerd_dir() / "containerd.sock"


def cni_conf_dir() -> Path:
    return paths.RUN / "cni" / "net.d"


def containerd_prepare(state: dict) -> None:
    home = containerd_dir()
    home.mkdir(parents=True, exist_ok=True)
    cni_conf_dir().mkdir(parents=True, exist_ok=True)
    (cni_conf_dir() / "10-floe.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "floe",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": POD_CIDR}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(paths.RUN / "cni" / "ipam"),
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                    {"type": "loopback"},
                ],
            },
            indent=2,
        )
    )
    # Images outlive the run directory: they are the node's cache of what hack built.
    root = paths.CACHE / "containerd"
    (home / "config.toml").write_text(f"""version = 2
root = "{root}"
state = "{home / "state"}"
[grpc]
  address = "{containerd_socket()}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: no process may lower its OOM score below containerd's.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf_dir()}"
""")


def containerd_command(state: dict) -> list[str]:
    return ["containerd", "--config", str(containerd_dir() / "config.toml"), "--log-level", "warn"]


def containerd_healthy(state: dict) -> bool:
    return _sh("ctr", "--address", str(containerd_socket()), "version", check=False).returncode == 0


def ctr(*args: str) -> list[str]:
    """A ctr command in the kubelet's image namespace."""
    return ["ctr", "--address", str(containerd_socket()), "--namespace", "k8s.io", *args]


def stop_containers() -> None:
    """Kills every container of the node's containerd (pods, builds): they would outlive it."""
    if not containerd_healthy({}):
        return
    for namespace in ("k8s.io", "moby"):
        base = ["ctr", "--address", str(containerd_socket()), "--namespace", namespace]
        listed = _sh(*base, "tasks", "ls", "-q", check=False).stdout.split()
        for task in listed:
            _sh(*base, "tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False)
        for task in listed:
            _sh(*base, "tasks", "delete", "--force", task, check=False)


# --- dockerd (builds the images) ----------------------------------------------------------


def docker_socket() -> Path:
    return paths.RUN / "docker" / "docker.sock"


def docker_env() -> dict[str, str]:
    return {"DOCKER_HOST": f"unix://{docker_socket()}", "DOCKER_BUILDKIT": "1"}


def dockerd_command(state: dict) -> list[str]:
    home = paths.RUN / "docker"
    home.mkdir(parents=True, exist_ok=True)
    # Builds run with the host's network; dockerd leaves iptables and bridges to kube-proxy
    # and CNI, and keeps its layer cache outside the run directory.
    return [
        "dockerd",
        f"--containerd={containerd_socket()}",
        f"--data-root={paths.CACHE / 'docker'}",
        f"--exec-root={home / 'exec'}",
        f"--pidfile={home / 'dockerd.pid'}",
        f"--host=unix://{docker_socket()}",
        "--iptables=false",
        "--ip-masq=false",
        "--bridge=none",
        "--storage-driver=overlay2",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        "--log-level=warn",
    ]


def dockerd_healthy(state: dict) -> bool:
    result = subprocess.run(
        [DOCKER, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **docker_env()},
    )
    return result.returncode == 0


# --- kubelet -------------------------------------------------------------------------------


def kubelet_dir() -> Path:
    return paths.RUN / "kubelet"


def kubelet_prepare(state: dict) -> None:
    home = kubelet_dir()
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 is all this machine has; kubelet 1.35 refuses it unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{containerd_socket()}",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        # One node on one machine: the API server's logs/exec requests are the only callers.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "failSwapOn": False,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE, which root lacks here
        "staticPodPath": "",
        # No image can be pulled again here: never collect images, never evict for disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 60,
        "serializeImagePulls": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": True,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "localStorageCapacityIsolation": True,
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "tlsCertFile": "",
        "tlsPrivateKeyFile": "",
    }
    (home / "config.json").write_text(json.dumps(config, indent=2))


def kubelet_command(state: dict) -> list[str]:
    home = kubelet_dir()
    return [
        str(paths.go_bin_dir("kube", paths.KUBERNETES_VERSION) / "kubelet"),
        f"--config={home / 'config.json'}",
        f"--kubeconfig={kube.kubeconfig_path()}",
        f"--root-dir={home / 'root'}",
        f"--cert-dir={kube.kube_dir() / 'kubelet-certs'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        "--v=1",
    ]


def kubelet_healthy(state: dict) -> bool:
    return kube.http_ok("http://127.0.0.1:10248/healthz")


# --- kube-scheduler, kube-proxy ----------------------------------------------------------


def scheduler_command(state: dict) -> list[str]:
    return [
        str(paths.go_bin_dir("kube", paths.KUBERNETES_VERSION) / "kube-scheduler"),
        *kube.control_plane_flags(state, "scheduler"),
        "--v=1",
    ]


def scheduler_healthy(state: dict) -> bool:
    return kube.http_ok(f"https://127.0.0.1:{state['ports']['scheduler']}/healthz")


def proxy_prepare(state: dict) -> None:
    home = paths.RUN / "kube-proxy"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(
        json.dumps(
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": str(kube.kubeconfig_path())},
                "mode": "iptables",
                "clusterCIDR": POD_CIDR,
                "hostnameOverride": NODE_NAME,
                "bindAddress": "0.0.0.0",
                "healthzBindAddress": f"127.0.0.1:{state['ports']['kube_proxy_health']}",
                "metricsBindAddress": f"127.0.0.1:{state['ports']['kube_proxy_metrics']}",
                # Leave the machine's conntrack table size alone.
                "conntrack": {"maxPerCore": 0},
                "iptables": {"masqueradeAll": False, "syncPeriod": "5s", "minSyncPeriod": "0s"},
            },
            indent=2,
        )
    )


def proxy_command(state: dict) -> list[str]:
    return [
        str(paths.go_bin_dir("kube", paths.KUBERNETES_VERSION) / "kube-proxy"),
        f"--config={paths.RUN / 'kube-proxy' / 'config.json'}",
        "--v=1",
    ]


def proxy_healthy(state: dict) -> bool:
    return kube.http_ok(f"http://127.0.0.1:{state['ports']['kube_proxy_health']}/healthz")


# --- CoreDNS -------------------------------------------------------------------------------


def coredns_prepare(state: dict) -> None:
    home = paths.RUN / "coredns"
    home.mkdir(parents=True, exist_ok=True)
    health = state["ports"]["coredns_health"]
    (home / "Corefile").write_text(f"""{CLUSTER_DOMAIN}:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{health}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kube.kubeconfig_path()}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
.:53 {{
    bind {NODE_IP}
    errors
    forward . /etc/resolv.conf
    cache 30
}}
""")


def coredns_command(state: dict) -> list[str]:
    return [
        str(paths.go_bin_dir("coredns", paths.COREDNS_VERSION) / "coredns"),
        "-conf",
        str(paths.RUN / "coredns" / "Corefile"),
    ]


def coredns_healthy(state: dict) -> bool:
    return kube.http_ok(f"http://127.0.0.1:{state['ports']['coredns_health']}/health")


def node_ready(api_token: str, server: str) -> bool:
    """True when the node is registered and Ready."""
    import urllib.request

    request = urllib.request.Request(f"{server}/api/v1/nodes/{NODE_NAME}")
    request.add_header("Authorization", f"Bearer {api_token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=kube.NO_VERIFY) as response:
            node = json.load(response)
    except Exception:  # noqa: BLE001 - an API server not answering, or not yet: not ready
        return False
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )
