"""The local stack's components: how each is configured, started and probed.

Kafka (KRaft, one node), the Apicurio schema registry (Confluent-compatible API), an S3 server
(versitygw on a local directory), the Google Cloud Storage and Azure Blob Storage emulators
(fake-gcs-server and Azurite, for warehouses on gs:// and abfs://), PostgreSQL (Debian's
server, the JDBC catalog's database), Iceberg's REST catalog server (a JdbcCatalog on
PostgreSQL behind it, S3FileIO on the S3 server), Toxiproxy (a fault proxy in front of Kafka,
the registry, S3, PostgreSQL and the REST catalog), etcd, kube-apiserver (RBAC, token
authentication, service-account token signing), kube-controller-manager (garbage collection,
namespaces, CronJobs) and the node (``node.py``: containerd, dockerd, kubelet, kube-scheduler,
kube-proxy, CoreDNS).  Ports are picked free at the first ``up``; what pods must reach listens
on the node's address, the rest on loopback.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import node, paths, procs
from .kube import ca_path, control_plane_flags, http_ok, kube_dir, kubeconfig_path, write_kubeconfig
from .node import NODE_IP

State = dict[str, Any]


def new_state() -> State:
    return complete_state(
        {
            "ports": {},
            "kafka_cluster_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
            "tokens": {"admin": secrets.token_hex(16), "nobody": secrets.token_hex(16)},
            "s3": {
                "access_key": "floe",
                "secret_key": secrets.token_hex(16),
                "bucket": "warehouse",
                "region": "us-east-1",
            },
        }
    )


PORTS = [
    "kafka",
    "kafka_controller",
    "registry",
    "s3",
    "gcs",
    "adls",
    "etcd",
    "etcd_peer",
    "apiserver",
    "controller_manager",
    "scheduler",
    "kube_proxy_health",
    "kube_proxy_metrics",
    "coredns_health",
    "postgres",
    "rest_catalog",
    "toxiproxy",
    "kafka_faulty",
    *(f"{name}_proxy" for name in ("kafka", "registry", "s3", "postgres", "rest_catalog")),
]


def complete_state(state: State) -> State:
    """Adds what a state made by an older floe lacks (a component added since): free ports, the
    database's password."""
    ports = state["ports"]
    for name in PORTS:
        while name not in ports:
            port = procs.free_port()
            if port not in ports.values():
                ports[name] = port
    state.setdefault("postgres", {"password": secrets.token_hex(16)})
    state.setdefault(
        "adls",
        {
            "account": "floelake",
            "container": "warehouse",
            "key": base64.b64encode(secrets.token_bytes(32)).decode(),
        },
    )
    return state


@dataclass
class Component:
    name: str
    prepare: Callable[[State], None]
    command: Callable[[State], list[str]]
    healthy: Callable[[State], bool]
    timeout: float = 90.0


# --- Kafka ---------------------------------------------------------------------------------


def _kafka_dir() -> Path:
    return paths.RUN / "kafka"


def _kafka_prepare(state: State) -> None:
    ports = state["ports"]
    home = _kafka_dir()
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.properties").write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{ports['kafka_controller']}",
                # FAULTY is the listener behind the fault proxy: it advertises the proxy's address,
                # so a client that bootstraps through the proxy reaches the broker only through it.
                f"listeners=PLAINTEXT://{NODE_IP}:{ports['kafka']},FAULTY://{NODE_IP}:{ports['kafka_faulty']},"
                f"CONTROLLER://127.0.0.1:{ports['kafka_controller']}",
                f"advertised.listeners=PLAINTEXT://{NODE_IP}:{ports['kafka']},"
                f"FAULTY://{NODE_IP}:{ports['kafka_proxy']}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,FAULTY:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={home / 'data'}",
                "num.partitions=1",
                "auto.create.topics.enable=true",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "log.retention.check.interval.ms=5000",
                "log.cleaner.backoff.ms=1000",  # compacted topics compact within seconds (tests)
                "",
            ]
        )
    )
    (home / "log4j2.properties").write_text(
        "\n".join(
            [
                "status = warn",
                "appender.out.type = Console",
                "appender.out.name = out",
                "appender.out.layout.type = PatternLayout",
                "appender.out.layout.pattern = [%d] %p %m (%c)%n",
                "rootLogger.level = WARN",
                "rootLogger.appenderRef.out.ref = out",
                "logger.server.name = kafka.server.KafkaRaftServer",
                "logger.server.level = INFO",
                "",
            ]
        )
    )
    if not (home / "data" / "meta.properties").exists():
        result = subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-cp",
                f"{paths.kafka_jars_dir()}/*",
                f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                state["kafka_cluster_id"],
                "-c",
                str(home / "server.properties"),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise procs.ComponentError(
                f"kafka: formatting the log directory failed:\n{result.stdout}\n{result.stderr}"
            )


def _kafka_command(state: State) -> list[str]:
    home = _kafka_dir()
    return [
        "java",
        "-Xms128m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        "-cp",
        f"{paths.kafka_jars_dir()}/*",
        "kafka.Kafka",
        str(home / "server.properties"),
    ]


def _kafka_healthy(state: State) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": f"{NODE_IP}:{state['ports']['kafka']}", "log_level": 0}
    )  # refused connections while it starts are expected
    return len(admin.list_topics(timeout=2).brokers) == 1


# --- Schema registry -----------------------------------------------------------------------


def _registry_dir() -> Path:
    return paths.RUN / "registry"


def _registry_prepare(state: State) -> None:
    _registry_dir().mkdir(parents=True, exist_ok=True)


def _registry_command(state: State) -> list[str]:
    # The schemas are kept on disk beside Kafka's data: records a restarted stack still holds
    # name schema ids the registry must still know.
    database = _registry_dir() / "schemas"
    return [
        "java",
        "-Xms64m",
        "-Xmx384m",
        "-XX:+UseSerialGC",
        f"-Dquarkus.http.port={state['ports']['registry']}",
        f"-Dquarkus.http.host={NODE_IP}",
        f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{database};DB_CLOSE_DELAY=-1",
        "-jar",
        str(paths.registry_dir() / "build" / "quarkus-app" / "quarkus-run.jar"),
    ]


def _registry_healthy(state: State) -> bool:
    return http_ok(f"http://{NODE_IP}:{state['ports']['registry']}/health/ready")


# --- S3 ------------------------------------------------------------------------------------


def _s3_root() -> Path:
    return paths.RUN / "s3"


def _s3_prepare(state: State) -> None:
    # versitygw's posix backend serves each top-level directory as a bucket.
    (_s3_root() / state["s3"]["bucket"]).mkdir(parents=True, exist_ok=True)


def _s3_command(state: State) -> list[str]:
    s3 = state["s3"]
    return [
        str(paths.go_bin_dir("versitygw", paths.VERSITYGW_VERSION) / "versitygw"),
        "--access",
        s3["access_key"],
        "--secret",
        s3["secret_key"],
        "--region",
        s3["region"],
        "--port",
        f"{NODE_IP}:{state['ports']['s3']}",
        "posix",
        str(_s3_root()),
    ]


def _s3_healthy(state: State) -> bool:
    # Unsigned requests are refused (403): the server answers, and authentication is on.
    return http_ok(f"http://{NODE_IP}:{state['ports']['s3']}/", ok_codes=(403,))


# --- Google Cloud Storage (fake-gcs-server) and Azure Blob Storage (Azurite) ---------------

GCS_BUCKET = "warehouse"


def _gcs_root() -> Path:
    return paths.RUN / "gcs"


def _gcs_prepare(state: State) -> None:
    # The filesystem backend serves each top-level directory as a bucket.
    (_gcs_root() / GCS_BUCKET).mkdir(parents=True, exist_ok=True)


def gcs_endpoint(state: State) -> str:
    return f"http://{NODE_IP}:{state['ports']['gcs']}"


def _gcs_command(state: State) -> list[str]:
    # Uploads are resumable: the Location the server answers with must be its own address.
    return [
        str(paths.go_bin_dir("fake-gcs-server", paths.FAKE_GCS_SERVER_VERSION) / "fake-gcs-server"),
        "-scheme",
        "http",
        "-host",
        NODE_IP,
        "-port",
        str(state["ports"]["gcs"]),
        "-external-url",
        gcs_endpoint(state),
        "-public-host",
        f"{NODE_IP}:{state['ports']['gcs']}",
        "-backend",
        "filesystem",
        "-filesystem-root",
        str(_gcs_root()),
        "-log-level",
        "warn",
    ]


def _gcs_healthy(state: State) -> bool:
    return http_ok(f"{gcs_endpoint(state)}/storage/v1/b/{GCS_BUCKET}")


def _adls_root() -> Path:
    return paths.RUN / "adls"


def adls_endpoint(state: State) -> str:
    """The account's Blob endpoint (path style: the emulator serves accounts by path)."""
    return f"http://{NODE_IP}:{state['ports']['adls']}/{state['adls']['account']}"


def _adls_prepare(state: State) -> None:
    _adls_root().mkdir(parents=True, exist_ok=True)


def _adls_command(state: State) -> list[str]:
    adls = state["adls"]
    azurite = paths.npm_dir("azurite", paths.AZURITE_VERSION) / "node_modules" / ".bin"
    return [
        "env",
        f"AZURITE_ACCOUNTS={adls['account']}:{adls['key']}",
        str(azurite / "azurite-blob"),
        "--blobHost",
        NODE_IP,
        "--blobPort",
        str(state["ports"]["adls"]),
        "--location",
        str(_adls_root()),
        "--skipApiVersionCheck",
        "--loose",
        "--disableTelemetry",
    ]


def _adls_healthy(state: State) -> bool:
    """The emulator answers, and the warehouse's container is there (made on first answer)."""
    import pyarrow.fs

    adls = state["adls"]
    authority = f"{NODE_IP}:{state['ports']['adls']}"
    if not procs.port_open(state["ports"]["adls"], NODE_IP):
        return False
    store = pyarrow.fs.AzureFileSystem(
        account_name=adls["account"],
        account_key=adls["key"],
        blob_storage_authority=authority,
        dfs_storage_authority=authority,
        blob_storage_scheme="http",
        dfs_storage_scheme="http",
    )
    store.create_dir(adls["container"])
    return True


# --- PostgreSQL (the JDBC catalog's database) ----------------------------------------------

POSTGRES_DATA = Path("/var/lib/floe/postgres")  # the server's user cannot reach root's home
POSTGRES_USER = "floe"
POSTGRES_DATABASE = "postgres"


def _postgres_bin(name: str) -> str:
    """A program of Debian's newest installed PostgreSQL server (hack/prereqs.sh)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parent.parent.name)
    )
    if not found:
        raise FileNotFoundError("PostgreSQL's server is not installed: run hack/prereqs.sh")
    return str(found[-1])


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command]


def _postgres_prepare(state: State) -> None:
    """A database cluster for this state (made again when the state is new): the user floe with
    the state's password, reachable by password from the node's address (the pods)."""
    marker = POSTGRES_DATA / ".floe-state"
    if marker.exists() and marker.read_text() == state["postgres"]["password"]:
        return
    if POSTGRES_DATA.exists():
        subprocess.run(["rm", "-rf", str(POSTGRES_DATA)], check=True)
    POSTGRES_DATA.mkdir(parents=True)
    subprocess.run(["chown", "postgres:postgres", str(POSTGRES_DATA)], check=True)
    password_file = POSTGRES_DATA / ".password"
    password_file.write_text(state["postgres"]["password"] + "\n")
    subprocess.run(["chown", "postgres", str(password_file)], check=True)
    subprocess.run(
        _as_postgres(
            [
                _postgres_bin("initdb"),
                "-D",
                str(POSTGRES_DATA / "data"),
                "-U",
                POSTGRES_USER,
                f"--pwfile={password_file}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
    )
    password_file.unlink()
    with (POSTGRES_DATA / "data" / "pg_hba.conf").open("a") as hba:
        hba.write("host all all 0.0.0.0/0 scram-sha-256\n")  # the pods, through the node
    marker.write_text(state["postgres"]["password"])


def _postgres_command(state: State) -> list[str]:
    return _as_postgres(
        [
            _postgres_bin("postgres"),
            "-D",
            str(POSTGRES_DATA / "data"),
            "-p",
            str(state["ports"]["postgres"]),
            "-c",
            f"listen_addresses=127.0.0.1,{NODE_IP}",
            "-c",
            "unix_socket_directories=",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=64MB",
        ]
    )


def _postgres_healthy(state: State) -> bool:
    return (
        subprocess.run(
            [
                _postgres_bin("pg_isready"),
                "-q",
                "-h",
                NODE_IP,
                "-p",
                str(state["ports"]["postgres"]),
            ],
            timeout=5,
        ).returncode
        == 0
    )


def postgres_jdbc_uri(state: State) -> str:
    return f"jdbc:postgresql://{NODE_IP}:{state['ports']['postgres']}/{POSTGRES_DATABASE}"


def _psql(state: State, sql: str, database: str = POSTGRES_DATABASE) -> str:
    return subprocess.run(
        [
            _postgres_bin("psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(state["ports"]["postgres"]),
            "-U",
            POSTGRES_USER,
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-qtAc",
            sql,
        ],
        env={"PGPASSWORD": state["postgres"]["password"], "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


# --- Iceberg REST catalog ------------------------------------------------------------------

REST_CATALOG_DATABASE = "rest_catalog"
REST_CATALOG_WAREHOUSE_PREFIX = "rest"


def _rest_catalog_prepare(state: State) -> None:
    """The server keeps its catalog in its own PostgreSQL database (the state's server is up:
    this component starts in a later wave)."""
    if not _psql(state, f"SELECT 1 FROM pg_database WHERE datname = '{REST_CATALOG_DATABASE}'"):
        _psql(state, f"CREATE DATABASE {REST_CATALOG_DATABASE}")


def rest_catalog_warehouse(state: State) -> str:
    return f"s3://{state['s3']['bucket']}/{REST_CATALOG_WAREHOUSE_PREFIX}"


def _rest_catalog_command(state: State) -> list[str]:
    """Iceberg's RESTCatalogServer, configured the way its fixture image is: CATALOG_* variables
    become catalog properties (``__`` is ``-``, ``_`` is ``.``)."""
    ports, s3 = state["ports"], state["s3"]
    settings = {
        "CATALOG_URI": f"jdbc:postgresql://127.0.0.1:{ports['postgres']}/{REST_CATALOG_DATABASE}",
        "CATALOG_JDBC_USER": POSTGRES_USER,
        "CATALOG_JDBC_PASSWORD": state["postgres"]["password"],
        "CATALOG_WAREHOUSE": rest_catalog_warehouse(state),
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": f"http://{NODE_IP}:{ports['s3']}",
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_S3_ACCESS__KEY__ID": s3["access_key"],
        "CATALOG_S3_SECRET__ACCESS__KEY": s3["secret_key"],
        "CATALOG_CLIENT_REGION": s3["region"],
        "CATALOG_REST_PORT": str(ports["rest_catalog"]),
    }
    return [
        "env",
        *(f"{key}={value}" for key, value in settings.items()),
        "java",
        "-Xms32m",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-cp",
        str(paths.rest_catalog_jars_dir() / "*"),
        "org.apache.iceberg.rest.RESTCatalogServer",
    ]


def _rest_catalog_healthy(state: State) -> bool:
    return http_ok(f"{rest_catalog_uri(state)}/v1/config")


def rest_catalog_uri(state: State) -> str:
    return f"http://{NODE_IP}:{state['ports']['rest_catalog']}"


# --- Toxiproxy (fault proxies) ------------------------------------------------------------

# Each proxy listens on its own port and forwards to one neighbour; tests and the nemesis add
# toxics (latency, resets, timeouts, a neighbour cut off) through its HTTP API.
PROXIED = {
    "kafka": "kafka_faulty",
    "registry": "registry",
    "s3": "s3",
    "postgres": "postgres",
    "rest_catalog": "rest_catalog",
}


def _toxiproxy_prepare(state: State) -> None:
    ports = state["ports"]
    (paths.RUN / "toxiproxy.json").write_text(
        json.dumps(
            [
                {
                    "name": name,
                    "listen": f"{NODE_IP}:{ports[f'{name}_proxy']}",
                    "upstream": f"{NODE_IP}:{ports[upstream]}",
                    "enabled": True,
                }
                for name, upstream in PROXIED.items()
            ],
            indent=2,
        )
    )


def _toxiproxy_command(state: State) -> list[str]:
    return [
        str(paths.go_bin_dir("toxiproxy", paths.TOXIPROXY_VERSION) / "server"),
        "-host",
        "127.0.0.1",
        "-port",
        str(state["ports"]["toxiproxy"]),
        "-config",
        str(paths.RUN / "toxiproxy.json"),
    ]


def toxiproxy_url(state: State) -> str:
    return f"http://127.0.0.1:{state['ports']['toxiproxy']}"


def _toxiproxy_healthy(state: State) -> bool:
    if not http_ok(f"{toxiproxy_url(state)}/version"):
        return False
    with urllib.request.urlopen(f"{toxiproxy_url(state)}/proxies", timeout=2) as response:
        return set(json.load(response)) == set(PROXIED)


def proxied_address(state: State, name: str) -> str:
    """host:port of the fault proxy in front of ``name`` (a key of :data:`PROXIED`)."""
    return f"{NODE_IP}:{state['ports'][f'{name}_proxy']}"


# --- etcd ----------------------------------------------------------------------------------


def _etcd_command(state: State) -> list[str]:
    ports = state["ports"]
    peer = f"http://127.0.0.1:{ports['etcd_peer']}"
    client = f"http://127.0.0.1:{ports['etcd']}"
    return [
        str(paths.go_bin_dir("etcd", paths.ETCD_VERSION) / "etcd"),
        "--name",
        "floe",
        "--data-dir",
        str(paths.RUN / "etcd"),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"floe={peer}",
        "--unsafe-no-fsync",
        "--quota-backend-bytes",
        str(2 * 1024**3),
        "--log-level",
        "warn",
    ]


def _etcd_healthy(state: State) -> bool:
    return http_ok(f"http://127.0.0.1:{state['ports']['etcd']}/health")


# --- kube-apiserver ------------------------------------------------------------------------


def apiserver_url(state: State) -> str:
    return f"https://{NODE_IP}:{state['ports']['apiserver']}"


SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


def _apiserver_prepare(state: State) -> None:
    home = kube_dir()
    (home / "certs").mkdir(parents=True, exist_ok=True)
    key = home / "service-account.key"
    if not key.exists():
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
        )
        subprocess.run(
            [
                "openssl",
                "rsa",
                "-in",
                str(key),
                "-pubout",
                "-out",
                str(home / "service-account.pub"),
            ],
            check=True,
            capture_output=True,
        )
    tokens = state["tokens"]
    # token,user,uid,"group1,group2"; "nobody" is authenticated but granted nothing.
    (home / "tokens.csv").write_text(
        f'{tokens["admin"]},floe-admin,floe-admin,"system:masters"\n'
        f"{tokens['nobody']},nobody,nobody\n"
    )
    home.joinpath("tokens.csv").chmod(0o600)
    write_kubeconfig(kubeconfig_path(), apiserver_url(state), "floe-admin", tokens["admin"])


def _apiserver_command(state: State) -> list[str]:
    home = kube_dir()
    return [
        str(paths.go_bin_dir("kube", paths.KUBERNETES_VERSION) / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{state['ports']['etcd']}",
        f"--bind-address={NODE_IP}",
        f"--advertise-address={NODE_IP}",
        f"--secure-port={state['ports']['apiserver']}",
        f"--cert-dir={home / 'certs'}",
        f"--token-auth-file={home / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={home / 'service-account.pub'}",
        f"--service-account-signing-key-file={home / 'service-account.key'}",
        f"--service-cluster-ip-range={node.SERVICE_CIDR}",
        "--allow-privileged=true",
        # The node's name resolves nowhere: logs and exec reach the kubelet by address.
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
        "--v=1",
    ]


def _apiserver_healthy(state: State) -> bool:
    return http_ok(f"{apiserver_url(state)}/readyz", token=state["tokens"]["admin"])


# --- kube-controller-manager ---------------------------------------------------------------


def _controller_manager_command(state: State) -> list[str]:
    home = kube_dir()
    return [
        str(paths.go_bin_dir("kube", paths.KUBERNETES_VERSION) / "kube-controller-manager"),
        *control_plane_flags(state, "controller_manager"),
        f"--cert-dir={home / 'controller-manager-certs'}",
        f"--service-account-private-key-file={home / 'service-account.key'}",
        f"--root-ca-file={ca_path()}",
        "--use-service-account-credentials=false",
        # nodelifecycle lifts the node's not-ready taint once the kubelet reports Ready.
        "--controllers=*,-nodeipam,-persistentvolume-binder,-attachdetach,"
        "-persistentvolume-expander,-cloud-node-lifecycle,-service-lb-controller,"
        "-node-route-controller",
        "--v=1",
    ]


def _controller_manager_healthy(state: State) -> bool:
    return http_ok(f"https://127.0.0.1:{state['ports']['controller_manager']}/healthz")


def _nothing(state: State) -> None:
    return None


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        Component("kafka", _kafka_prepare, _kafka_command, _kafka_healthy),
        Component("registry", _registry_prepare, _registry_command, _registry_healthy),
        Component("s3", _s3_prepare, _s3_command, _s3_healthy, timeout=30),
        Component("gcs", _gcs_prepare, _gcs_command, _gcs_healthy, timeout=30),
        Component("adls", _adls_prepare, _adls_command, _adls_healthy, timeout=30),
        Component("postgres", _postgres_prepare, _postgres_command, _postgres_healthy, timeout=60),
        Component(
            "rest-catalog",
            _rest_catalog_prepare,
            _rest_catalog_command,
            _rest_catalog_healthy,
            timeout=60,
        ),
        Component(
            "toxiproxy", _toxiproxy_prepare, _toxiproxy_command, _toxiproxy_healthy, timeout=30
        ),
        Component("etcd", _nothing, _etcd_command, _etcd_healthy, timeout=30),
        Component(
            "containerd",
            node.containerd_prepare,
            node.containerd_command,
            node.containerd_healthy,
            timeout=30,
        ),
        Component("kube-apiserver", _apiserver_prepare, _apiserver_command, _apiserver_healthy),
        Component("dockerd", _nothing, node.dockerd_command, node.dockerd_healthy, timeout=60),
        Component(
            "kube-controller-manager",
            _nothing,
            _controller_manager_command,
            _controller_manager_healthy,
        ),
        Component("kube-scheduler", _nothing, node.scheduler_command, node.scheduler_healthy),
        Component("kubelet", node.kubelet_prepare, node.kubelet_command, node.kubelet_healthy),
        Component("kube-proxy", node.proxy_prepare, node.proxy_command, node.proxy_healthy),
        Component(
            "coredns", node.coredns_prepare, node.coredns_command, node.coredns_healthy, timeout=30
        ),
    ]
}

# Components are started in waves; each wave's members start together and the next wave
# waits for them to be healthy.
WAVES: list[list[str]] = [
    ["etcd", "kafka", "registry", "s3", "gcs", "adls", "postgres", "containerd", "toxiproxy"],
    ["kube-apiserver", "dockerd", "rest-catalog"],
    ["kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns"],
]
