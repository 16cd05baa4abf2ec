"""infra/up --brokers 3's generated material, without starting a node: configs, ports, env, arguments."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import infra

PORTS = {"kafka1": 4101, "controller1": 4201, "kafka2": 4102, "controller2": 4202, "kafka3": 4103, "controller3": 4203}


def props(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_each_node_is_broker_and_controller_of_one_static_quorum_with_rf_3_and_min_isr_2(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    for n in (1, 2, 3):
        infra.write_node_config(paths, n, PORTS)
    for n in (1, 2, 3):
        node = paths.node(n)
        assert stat.S_IMODE(node.server_props.stat().st_mode) == 0o600
        config = props(node.server_props)
        assert config["process.roles"] == "broker,controller"
        assert config["node.id"] == str(n)
        assert config["controller.quorum.voters"] == "1@127.0.0.1:4201,2@127.0.0.1:4202,3@127.0.0.1:4203"
        assert "controller.quorum.bootstrap.servers" not in config
        assert config["listeners"] == f"PLAINTEXT://127.0.0.1:410{n},CONTROLLER://127.0.0.1:420{n}"
        assert config["advertised.listeners"] == config["listeners"]
        assert config["log.dirs"] == str(tmp_path / ".infra" / "kafka" / "cluster" / f"node{n}" / "data")
        assert {k: config[k] for k in config if k.endswith(("replication.factor", "min.insync.replicas", ".min.isr"))} == {
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
        }
        assert config["log.retention.ms"] == config["log.retention.bytes"] == "-1"
    assert paths.log4j.is_file()


def test_secure_nodes_share_the_users_ca_and_super_users_of_the_single_broker(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    passwords = {u: f"pw-{u}" for u in infra.SCRAM_USERS}
    infra.write_node_config(paths, 2, PORTS, passwords)
    infra.write_kafka_configs(paths, 4001, 4002, passwords)
    node, single = props(paths.node(2).server_props), props(paths.server_props)
    assert node["listeners"] == "SASL_SSL://127.0.0.1:4102,CONTROLLER://127.0.0.1:4202"
    assert node["log.dirs"] == str(paths.node(2).data_secure)
    for key in (
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "sasl.mechanism.inter.broker.protocol",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
        "listener.name.controller.ssl.client.auth",
        "ssl.keystore.location",
        "ssl.truststore.location",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
    ):
        assert node[key] == single[key], key
    assert node["super.users"] == "User:admin;User:CN=bernstein-broker"
    assert node["listener.name.controller.ssl.client.auth"] == "required"


def test_the_single_broker_keeps_its_dynamic_quorum_and_replication_1(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    infra.write_kafka_configs(paths, 4001, 4002)
    config = props(paths.server_props)
    assert config["node.id"] == "1"
    assert config["controller.quorum.bootstrap.servers"] == "127.0.0.1:4002"
    assert "controller.quorum.voters" not in config
    assert config["default.replication.factor"] == config["transaction.state.log.replication.factor"] == "1"
    assert config["min.insync.replicas"] == config["transaction.state.log.min.isr"] == "1"


def test_storage_format_of_a_node_has_no_standalone_and_the_same_scram_users(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    passwords = {u: f"pw-{u}" for u in infra.SCRAM_USERS}
    node = infra.storage_format_argv(paths, "java", "c" * 22, paths.node(3).server_props, passwords, standalone=False)
    single = infra.storage_format_argv(paths, "java", "c" * 22, paths.server_props, passwords, standalone=True)
    assert "--standalone" not in node and "--standalone" in single
    assert f"--config={paths.node(3).server_props}" in node and f"--cluster-id={'c' * 22}" in node
    scram = [a for a in node if a.startswith("--add-scram=")]
    assert scram == [a for a in single if a.startswith("--add-scram=")]
    assert scram == [f"--add-scram=SCRAM-SHA-512=[name={u},password=pw-{u}]" for u in infra.SCRAM_USERS]
    assert not [
        a for a in infra.storage_format_argv(paths, "java", "c" * 22, paths.server_props, None, standalone=False) if "scram" in a
    ]


def test_env_lists_the_three_bootstraps_and_the_replication_settings(tmp_path: Path) -> None:
    ctx = infra.Ctx(tmp_path, None, brokers=3)
    bootstrap = infra.cluster_bootstrap(PORTS)
    assert bootstrap == "127.0.0.1:4101,127.0.0.1:4102,127.0.0.1:4103"
    ctx.write_env(bootstrap, "http://127.0.0.1:2", "ak", "sk", "b", None, infra.CLUSTER_REPLICATION)
    lines = ctx.p.env.read_text().splitlines()
    assert lines[0] == f"BERNSTEIN_KAFKA_BOOTSTRAP={bootstrap}"
    assert lines[-2:] == ["BERNSTEIN_TOPIC_REPLICATION_FACTOR=3", "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS=2"]
    ctx.write_env("127.0.0.1:1", "http://127.0.0.1:2", "ak", "sk", "b", None)
    assert not [line for line in ctx.p.env.read_text().splitlines() if line.startswith("BERNSTEIN_TOPIC_")]


def test_settings_read_the_replication_of_the_cluster_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bernstein.substrate.kafka import replication_settings

    ctx = infra.Ctx(tmp_path, None, brokers=3)
    ctx.write_env(infra.cluster_bootstrap(PORTS), "http://127.0.0.1:2", "ak", "sk", "b", None, infra.CLUSTER_REPLICATION)
    monkeypatch.chdir(tmp_path)
    for name in ("BERNSTEIN_TOPIC_REPLICATION_FACTOR", "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS"):
        monkeypatch.delenv(name, raising=False)
    assert replication_settings() == (3, 2)


def test_node_ports_are_recovered_from_the_node_configs(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    for n in (1, 2, 3):
        infra.write_node_config(paths, n, PORTS, {u: "x" for u in infra.SCRAM_USERS} if n == 2 else None)
    assert infra.load_ports(paths) == PORTS


def test_own_cluster_bootstrap_is_not_an_external_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = infra.Paths(tmp_path)
    infra.save_ports(paths, PORTS)
    ctx = infra.Ctx(tmp_path, None)
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", infra.cluster_bootstrap(PORTS))
    assert ctx.kafka_external() is None
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "kafka.example:9092")
    assert ctx.kafka_external() == "kafka.example:9092"


def test_layout_defaults_to_one_broker(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    assert infra.read_layout(paths) == 1
    infra.atomic_write(paths.brokers, "3\n")
    assert infra.read_layout(paths) == 3
    infra.atomic_write(paths.brokers, "7\n")
    assert infra.read_layout(paths) == 1


def test_a_formatted_secure_node_without_its_scram_passwords_is_refused(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    data = paths.node(2).data_secure
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(infra.InfraError, match=r"node2/data-secure is formatted but .*scram\.json"):
        infra.ensure_scram_passwords(paths)


def test_the_cluster_id_is_a_formatted_nodes_own(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    first = infra.cluster_cluster_id(paths, secure=False)
    assert paths.cluster_id_multi.read_text() == first + "\n"
    assert infra.cluster_cluster_id(paths, secure=False) == first
    data = paths.node(3).data
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("cluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    assert infra.cluster_cluster_id(paths, secure=False) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert not paths.cluster_id.exists()  # the single broker's id is its own


def test_arguments_brokers_and_node() -> None:
    assert infra.parse_args(["up"]).brokers == 1
    assert infra.parse_args(["up", "--brokers", "3", "--secure"]).brokers == 3
    args = infra.parse_args(["node", "stop", "2"])
    assert (args.command, args.action, args.number) == ("node", "stop", 2)
    for wrong in (["up", "--brokers", "2"], ["node", "start", "4"], ["node", "kill", "1"]):
        with pytest.raises(SystemExit):
            infra.parse_args(wrong)


def test_node_without_a_cluster_is_a_typed_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert infra.main(["--root", str(tmp_path), "node", "stop", "1"]) == 1
    assert "start it with `infra/up --brokers 3`" in capsys.readouterr().err
