"""The Kubernetes deployment, checked without a cluster: the Helm values (deploy/helm) give a
K8sRunLauncher, run queue, pool and Postgres configuration that dagster-k8s's, dagster-postgres's
and Dagster's own config schemas accept; the definitions build and resolve a run config with
k8s_job_executor; the Dockerfile serves the code location the values point at.

No Kubernetes cluster, Docker engine or helm binary is available here: the values are turned
into the instance's dagster.yaml keys the way the chart's templates do it
(templates/helpers/instance/_run-launcher.tpl, _concurrency.tpl, _run-coordinator.tpl,
_postgresql.tpl of the official chart), and that is what is validated.
"""

import os
import re
import shlex
import subprocess
import sys

import dagster as dg
import pytest
import yaml
from dagster_k8s import K8sRunLauncher, k8s_job_executor
from dagster_postgres import DagsterPostgresStorage

from tests.conftest import PROJECT_ROOT
from trajectory_assets.definitions import K8S_STEPS, MAIN_JOB, RunSettings, build_definitions
from trajectory_assets.dagster_internals import config_errors

VALUES = yaml.safe_load((PROJECT_ROOT / "deploy" / "helm" / "values.yaml").read_text())
DOCKERFILE = (PROJECT_ROOT / "Dockerfile").read_text()


def run_launcher_config(values: dict) -> dict:
    """`run_launcher:` as the chart renders it for runLauncher.type K8sRunLauncher."""
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    config = {
        "load_incluster_config": launcher["loadInclusterConfig"],
        "job_namespace": launcher.get("jobNamespace") or "trajectory-assets",  # default: the release's namespace
        "image_pull_policy": launcher["imagePullPolicy"],
        "service_account_name": "trajectory-assets-dagster",
        "dagster_home": {"env": "DAGSTER_HOME"},
        "instance_config_map": {"env": "DAGSTER_K8S_INSTANCE_CONFIG_MAP"},
        "postgres_password_secret": {"env": "DAGSTER_K8S_PG_PASSWORD_SECRET"},
        "env_config_maps": [{"env": "DAGSTER_K8S_PIPELINE_RUN_ENV_CONFIGMAP"}]
        + [item["name"] for item in launcher.get("envConfigMaps", [])],
    }
    if launcher.get("envSecrets"):
        config["env_secrets"] = [item["name"] for item in launcher["envSecrets"]]
    if launcher.get("envVars"):
        config["env_vars"] = launcher["envVars"]
    if launcher.get("runK8sConfig"):
        config["run_k8s_config"] = {_snake(key): value for key, value in launcher["runK8sConfig"].items()}
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def instance_config(values: dict) -> dict:
    """The parts of the chart's dagster.yaml that these values set."""
    postgres = values["postgresql"]
    storage = {"postgres_db": {"username": postgres["postgresqlUsername"], "password": {"env": "DAGSTER_PG_PASSWORD"},
                               "hostname": postgres["postgresqlHost"], "db_name": postgres["postgresqlDatabase"],
                               "port": postgres["service"]["port"]}}
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    concurrency = values["concurrency"]
    return {
        "run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage", "config": storage},
        "event_log_storage": {"module": "dagster_postgres.event_log", "class": "PostgresEventLogStorage",
                              "config": storage},
        "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage",
                             "config": storage},
        "run_launcher": run_launcher_config(values),
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
                            "config": {"dequeue_interval_seconds": queued["dequeueIntervalSeconds"]}},
        "concurrency": {"runs": {"max_concurrent_runs": concurrency["runs"]["maxConcurrentRuns"]},
                        "pools": {"default_limit": concurrency["pools"]["defaultLimit"]}},
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }


def test_the_run_launcher_config_satisfies_dagster_k8s_schema():
    launcher = run_launcher_config(VALUES)
    assert config_errors(K8sRunLauncher.config_type(), launcher["config"]) == []
    assert "trajectory-assets-s3" in launcher["config"]["env_secrets"]  # run pods reach S3


def test_a_broken_run_launcher_config_is_caught():
    broken = run_launcher_config(VALUES)["config"] | {"env_secrets": "trajectory-assets-s3"}  # not a list
    assert config_errors(K8sRunLauncher.config_type(), broken)


def test_the_rendered_instance_satisfies_dagster_and_dagster_postgres_schemas():
    config = instance_config(VALUES)
    assert config_errors("instance", config) == []
    assert config_errors(DagsterPostgresStorage.config_type(), config["run_storage"]["config"]) == []


def test_the_definitions_build_with_the_k8s_executor_for_the_datasets_steps():
    defs = build_definitions(RunSettings(sources=["s3://rollouts/incoming"], storage="s3://datasets/out",
                                         executor="k8s"))
    dg.Definitions.validate_loadable(defs)
    datasets = defs.resolve_job_def(MAIN_JOB)
    assert datasets.executor_def.name == "k8s_job_executor"
    assert defs.resolve_job_def("ingest_rollout_batch").executor_def.name == "in_process"  # one small step
    assert config_errors(k8s_job_executor.config_schema.config_type, K8S_STEPS) == []
    # what a run of the datasets job resolves its executor to on the cluster
    (name, executor), = dg.validate_run_config(datasets, {})["execution"].items()
    assert name == "k8s_job_executor" and executor["max_concurrent"] == K8S_STEPS["max_concurrent"] == 16
    # a pod per step: the plan, each shard (a dynamic step per bucket range), each export's merge
    ops = {op.name for op in datasets.graph.iterate_op_defs()}
    assert {"plan_exports", "render_shard", "merge_sft", "merge_verl", "report_trajectories", "report_exports"} <= ops
    (plan,) = [node for node in datasets.graph.iterate_op_defs() if node.name == "plan_exports"]
    assert plan.output_defs[0].is_dynamic
    assert executor["step_k8s_config"]["container_config"] == K8S_STEPS["step_k8s_config"]["container_config"]


def test_the_executor_is_chosen_by_the_environment(monkeypatch):
    monkeypatch.setenv("TRAJECTORY_EXECUTOR", "k8s")
    assert RunSettings.from_env().executor == "k8s"
    with pytest.raises(ValueError, match="TRAJECTORY_EXECUTOR"):
        build_definitions(RunSettings(sources=["/in"], storage="/out", executor="kubernetes"))


def test_the_code_location_deployment_matches_the_image_and_reads_its_settings(monkeypatch, tmp_path):
    (deployment,) = VALUES["dagster-user-deployments"]["deployments"]
    command = next(line for line in DOCKERFILE.splitlines() if line.startswith("CMD "))
    served = yaml.safe_load(command.removeprefix("CMD "))
    # the chart runs `dagster api grpc -h 0.0.0.0 -p <port> <dagsterApiGrpcArgs>`: the image's own command
    # serves the same module on the same port
    assert served[:3] == ["dagster", "api", "grpc"]
    assert served[served.index("-p") + 1] == str(deployment["port"])
    assert " ".join(deployment["dagsterApiGrpcArgs"]) in shlex.join(served)
    workspace = yaml.safe_load((PROJECT_ROOT / "workspace.yaml").read_text())
    assert deployment["dagsterApiGrpcArgs"][1] == workspace["load_from"][0]["python_module"]["module_name"]
    for line in DOCKERFILE.splitlines():  # everything the image copies is in the repository
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (PROJECT_ROOT / source).exists(), source
    # the image compiles decontamination's pass and the shingle hashes: the command it runs does compile them
    precompile = next(line for line in DOCKERFILE.splitlines() if line.startswith('RUN python -c "from trajectory_'))
    image_env = dict(re.findall(r"^ENV (\w+)=(\S+)$", DOCKERFILE, re.M))
    assert image_env.get("NUMBA_CPU_NAME") == "generic"  # a cache compiled anywhere serves every node
    env = {**os.environ, **image_env, "NUMBA_CACHE_DIR": str(tmp_path)}  # (numba's cache, here)
    done = subprocess.run([sys.executable, "-c", shlex.split(precompile.removeprefix("RUN "))[2]],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert {path.name.split("-")[0] for path in tmp_path.rglob("*.nbi")} == {"ngram_kernel.scan",
                                                                           "shingle_kernel.sha1_words"}
    # a pod's process, later: it loads the pass from that cache, compiling nothing
    loaded = subprocess.run([sys.executable, "-c", "from trajectory_assets.ingest import decontamination as d, "
                             "ngram_kernel as k; d.words('x'); print(*[(sum(f.stats.cache_hits.values()), "
                             "sum(f.stats.cache_misses.values())) for f in (k.scan,)])"],
                            capture_output=True, text=True, cwd=PROJECT_ROOT, env=env)
    assert loaded.stdout.split() == ["(1,", "0)"], loaded.stderr
    # redaction's fast prefilter, pinned as `make setup` installs it
    hyperscan = re.search(r"HYPERSCAN := (\S+)", (PROJECT_ROOT / "Makefile").read_text()).group(1)
    assert f"uv pip install --system --no-cache {hyperscan}" in DOCKERFILE
    lock = (PROJECT_ROOT / "requirements.lock").read_text()
    assert "dagster-k8s==0.29.27" in lock and "dagster-postgres==0.29.27" in lock and "dagster==1.13.27" in lock
    # the code location reads its sources, storage and executor from the deployment's env
    for item in deployment["env"]:
        monkeypatch.setenv(item["name"], item["value"])
    settings = RunSettings.from_env()
    assert settings.sources == ["s3://rollouts/incoming"] and settings.storage.startswith("s3://")
    assert settings.executor == "k8s"
