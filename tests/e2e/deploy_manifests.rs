//! The files in `deploy/` are checked like code: the nats-server configs with
//! nats-server itself (`-t`), the Flotilla configs with the real config loader,
//! the Kubernetes manifests and the compose file parsed as YAML with their
//! required fields and cross references (Secret keys, ConfigMaps, NATS users),
//! and the systemd units' sections and binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use flotilla_config::Settings;
use flotilla_testkit::TempDir;
use flotilla_testkit::nats_conf::{ROLE_USERS, deploy_dir};
use yaml_rust2::{Yaml, YamlLoader};

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml_docs(p: &Path) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(p)).unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", p.display()))
}

fn s<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str().unwrap_or_else(|| panic!("missing or non-string {what}: {y:?}"))
}

/// NATS users defined in deploy/nats/roles.conf.
fn nats_users() -> BTreeSet<String> {
    let roles = read(&deploy_dir().join("nats/roles.conf"));
    roles
        .lines()
        .filter_map(|l| l.trim().strip_prefix("{ user:"))
        .map(|rest| rest.split(',').next().unwrap().trim().to_string())
        .collect()
}

fn nats_check(conf: &Path) {
    let mut cmd = Command::new(std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into()));
    cmd.arg("-t").arg("-c").arg(conf);
    for (_, var, pw) in ROLE_USERS {
        cmd.env(var, pw);
    }
    let out = cmd.output().expect("run nats-server -t");
    assert!(
        out.status.success(),
        "{} rejected by nats-server: {}",
        conf.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn nats_server_configs_are_valid_and_define_every_role() {
    let d = deploy_dir();
    for conf in
        ["nats/nats-local.conf", "nats/cluster/nats-1.conf", "nats/cluster/nats-2.conf", "nats/cluster/nats-3.conf"]
    {
        nats_check(&d.join(conf));
    }
    // The production config with test certificates in place of /etc/nats/tls.
    let pki = crate::tls::Pki::new();
    nats_check(&pki.production_conf());
    // The Kubernetes config is mounted next to roles.conf: check it that way.
    let tmp = TempDir::new("k8s-nats");
    std::fs::copy(d.join("kubernetes/nats.conf"), tmp.path().join("nats.conf")).unwrap();
    std::fs::copy(d.join("nats/roles.conf"), tmp.path().join("roles.conf")).unwrap();
    nats_check(&tmp.path().join("nats.conf"));
    // A server without the password variables refuses to start (no empty passwords).
    let out = Command::new(std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into()))
        .args(["-t", "-c"])
        .arg(d.join("nats/nats-local.conf"))
        .env_remove("FLOTILLA_ORCHESTRATOR_PASSWORD")
        .output()
        .unwrap();
    assert!(!out.status.success(), "roles.conf must require the password variables");
    let users = nats_users();
    for (user, _, _) in ROLE_USERS {
        assert!(users.contains(*user), "roles.conf lacks user {user} ({users:?})");
    }
}

#[test]
fn flotilla_configs_of_the_deployments_load() {
    let s = Settings::load(Some(&deploy_dir().join("cluster/flotilla.toml"))).expect("deploy/cluster/flotilla.toml");
    assert_eq!(s.nats.replicas, 3);
    assert_eq!(s.nats.url.split(',').count(), 3, "lists every node");
}

#[test]
fn kubernetes_manifests_are_complete_and_consistent() {
    let dir = deploy_dir().join("kubernetes");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            docs.extend(yaml_docs(&p).into_iter().map(|d| (p.clone(), d)));
        }
    }
    let mut by_kind: BTreeMap<String, Vec<&Yaml>> = BTreeMap::new();
    for (p, d) in &docs {
        let kind = s(&d["kind"], &format!("kind in {}", p.display()));
        s(&d["apiVersion"], "apiVersion");
        s(&d["metadata"]["name"], "metadata.name");
        if kind != "Namespace" {
            assert_eq!(s(&d["metadata"]["namespace"], "metadata.namespace"), "flotilla", "{}", p.display());
        }
        by_kind.entry(kind.to_string()).or_default().push(d);
    }
    // Credentials live in a Secret; every secretKeyRef names one of its keys.
    let secret = by_kind["Secret"][0];
    assert_eq!(s(&secret["metadata"]["name"], "secret name"), "flotilla-credentials");
    let secret_keys: BTreeSet<&str> =
        secret["stringData"].as_hash().expect("stringData").keys().map(|k| s(k, "key")).collect();
    // Config lives in a ConfigMap whose flotilla.toml is a valid Flotilla config.
    let cm = by_kind["ConfigMap"].iter().find(|c| s(&c["metadata"]["name"], "name") == "flotilla-config").unwrap();
    let tmp = TempDir::new("k8s-config");
    let toml = tmp.path().join("flotilla.toml");
    std::fs::write(&toml, s(&cm["data"]["flotilla.toml"], "flotilla.toml")).unwrap();
    let settings = Settings::load(Some(&toml)).expect("the ConfigMap's flotilla.toml loads");
    assert_eq!(settings.nats.replicas, 3);

    let users = nats_users();
    let mut worker_found = false;
    for w in by_kind["Deployment"].iter().chain(by_kind["StatefulSet"].iter()) {
        let name = s(&w["metadata"]["name"], "name");
        assert!(w["spec"]["replicas"].as_i64().is_some_and(|r| r >= 1), "{name}: spec.replicas");
        let selector = w["spec"]["selector"]["matchLabels"].as_hash().expect("selector");
        let labels = w["spec"]["template"]["metadata"]["labels"].as_hash().expect("template labels");
        for (k, v) in selector {
            assert_eq!(labels.get(k), Some(v), "{name}: selector {k:?} must match the pod labels");
        }
        let pod = &w["spec"]["template"]["spec"];
        let containers = pod["containers"].as_vec().expect("containers");
        assert!(!containers.is_empty());
        for c in containers {
            s(&c["image"], "image");
            let mut env = BTreeMap::new();
            for e in c["env"].as_vec().map(Vec::as_slice).unwrap_or_default() {
                let key = &e["valueFrom"]["secretKeyRef"];
                if !key.is_badvalue() {
                    assert_eq!(s(&key["name"], "secret name"), "flotilla-credentials", "{name}");
                    assert!(
                        secret_keys.contains(s(&key["key"], "secret key")),
                        "{name}: unknown secret key {:?}",
                        key["key"]
                    );
                }
                if let Some(v) = e["value"].as_str() {
                    env.insert(s(&e["name"], "env name"), v);
                }
            }
            if let Some(user) = env.get("FLOTILLA_NATS__AUTH__USER") {
                assert!(users.contains(*user), "{name}: NATS user {user} is not in roles.conf");
                assert_eq!(env.get("FLOTILLA_NATS__INBOX_PREFIX"), Some(&format!("_INBOX.{user}").as_str()), "{name}");
                assert!(!env.contains_key("NATS_PASSWORD"), "{name}: the password must come from the Secret");
            }
            if name.starts_with("flotilla-worker") {
                worker_found = true;
                assert_eq!(env.get("FLOTILLA_NATS__MANAGE_TOPOLOGY"), Some(&"false"), "{name}");
            }
        }
        for v in pod["volumes"].as_vec().map(Vec::as_slice).unwrap_or_default() {
            if let Some(cm) = v["configMap"]["name"].as_str() {
                assert!(cm == "flotilla-config" || cm == "nats-config", "{name}: volume from unknown ConfigMap {cm}");
            }
        }
    }
    assert!(worker_found, "a worker Deployment");
    // nats-config is created from these files (see nats.yaml).
    assert!(dir.join("nats.conf").is_file() && deploy_dir().join("nats/roles.conf").is_file());
}

/// Every document of every manifest in deploy/kubernetes/, by kind.
fn kubernetes_docs() -> BTreeMap<String, Vec<Yaml>> {
    let mut by_kind: BTreeMap<String, Vec<Yaml>> = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir().join("kubernetes")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            for d in yaml_docs(&p) {
                by_kind.entry(s(&d["kind"], "kind").to_string()).or_default().push(d);
            }
        }
    }
    by_kind
}

/// KEDA scales each worker Deployment on its own queue (the
/// stream and durable consumer Flotilla really uses, read from the NATS
/// monitoring port the cluster serves), disruption budgets select real pods,
/// and a pod's termination grace outlasts the worker's drain grace.
#[test]
fn autoscaling_targets_the_real_queue_and_pods_outlast_the_drain() {
    let by_kind = kubernetes_docs();
    let deployments: BTreeMap<&str, &Yaml> =
        by_kind["Deployment"].iter().map(|d| (s(&d["metadata"]["name"], "name"), d)).collect();
    let subjects = flotilla_protocol::subjects::Subjects::new("flotilla");
    let nats_conf = read(&deploy_dir().join("kubernetes/nats.conf"));
    let monitor_port = nats_conf.lines().find_map(|l| l.strip_prefix("http: ")).and_then(|a| a.rsplit(':').next());
    let roles = read(&deploy_dir().join("nats/roles.conf"));
    let mut scaled = BTreeSet::new();
    for so in &by_kind["ScaledObject"] {
        let target = s(&so["spec"]["scaleTargetRef"]["name"], "scaleTargetRef.name");
        let d = deployments.get(target).unwrap_or_else(|| panic!("ScaledObject targets unknown Deployment {target}"));
        let ty = s(&d["spec"]["template"]["metadata"]["labels"]["flotilla.dev/subagent-type"], "subagent-type label");
        let trigger = &so["spec"]["triggers"][0];
        assert_eq!(s(&trigger["type"], "trigger type"), "nats-jetstream");
        let m = &trigger["metadata"];
        assert_eq!(s(&m["stream"], "stream"), subjects.tasks_stream());
        let ty = flotilla_protocol::ids::SubagentType::new(ty).unwrap();
        assert_eq!(s(&m["consumer"], "consumer"), subjects.task_consumer(&ty), "{target}: the type's durable consumer");
        let endpoint = s(&m["natsServerMonitoringEndpoint"], "monitoring endpoint");
        assert_eq!(endpoint.rsplit(':').next(), monitor_port, "{target}: the port nats.conf serves `http` on");
        assert!(roles.contains(&format!("{} {{", s(&m["account"], "account"))), "{target}: account in roles.conf");
        assert!(so["spec"]["minReplicaCount"].as_i64().is_some_and(|n| n >= 1), "{target}: never scaled to zero");
        scaled.insert(target);
    }
    let orchestrator = deployments["flotilla-orchestrator"];
    assert!(orchestrator["spec"]["replicas"].as_i64().unwrap() >= 2, "orchestrators fail over to each other");
    for (name, d) in &deployments {
        if !name.starts_with("flotilla-worker") {
            continue;
        }
        assert!(scaled.contains(name), "{name} has a ScaledObject");
        let pod = &d["spec"]["template"]["spec"];
        let args: Vec<&str> = pod["containers"][0]["args"].as_vec().unwrap().iter().map(|a| s(a, "arg")).collect();
        let grace: i64 = args.iter().position(|a| *a == "--grace").map_or(30, |i| args[i + 1].parse().unwrap());
        let pod_grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
        assert!(pod_grace > grace, "{name}: terminationGracePeriodSeconds {pod_grace} must exceed --grace {grace}");
    }
    let workloads: Vec<&Yaml> = by_kind["Deployment"].iter().chain(by_kind["StatefulSet"].iter()).collect();
    for pdb in &by_kind["PodDisruptionBudget"] {
        let name = s(&pdb["metadata"]["name"], "name");
        let selector = pdb["spec"]["selector"]["matchLabels"].as_hash().expect("PDB selector");
        let matches = workloads.iter().any(|w| {
            let labels = w["spec"]["template"]["metadata"]["labels"].as_hash().unwrap();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        });
        assert!(matches, "PodDisruptionBudget {name} selects no pods");
    }
}

#[test]
fn compose_file_defines_the_cluster_and_scalable_workers() {
    let dir = deploy_dir().join("compose");
    let doc = &yaml_docs(&dir.join("compose.yaml"))[0];
    let services = doc["services"].as_hash().expect("services");
    // `<<: *anchor` merges are not applied by a YAML 1.2 parser: look through them.
    let get = |svc: &Yaml, key: &str| -> Yaml {
        if !svc[key].is_badvalue() { svc[key].clone() } else { svc["<<"][key].clone() }
    };
    let names: BTreeSet<&str> = services.keys().map(|k| s(k, "service")).collect();
    for n in ["nats-1", "nats-2", "nats-3", "orchestrator", "worker-finance"] {
        assert!(names.contains(n), "service {n}");
    }
    let users = nats_users();
    for (k, svc) in services {
        let name = s(k, "service");
        assert!(get(svc, "image").as_str().is_some(), "{name}: image");
        for v in get(svc, "volumes").as_vec().map(Vec::as_slice).unwrap_or_default() {
            let src = s(v, "volume").split(':').next().unwrap();
            if src.starts_with('.') {
                assert!(dir.join(src).exists(), "{name}: mounted {src} does not exist");
            }
        }
        if let Some(user) = svc["environment"]["FLOTILLA_NATS__AUTH__USER"].as_str() {
            assert!(users.contains(user), "{name}: NATS user {user}");
        }
    }
    let worker = &services[&Yaml::String("worker-finance".into())];
    assert!(worker["deploy"]["replicas"].as_i64().is_some(), "workers scale with deploy.replicas");
    assert_eq!(worker["environment"]["FLOTILLA_NATS__MANAGE_TOPOLOGY"].as_str(), Some("false"));
    for node in 1..=3 {
        let svc = &services[&Yaml::String(format!("nats-{node}"))];
        let conf = s(&svc["command"][1], "config arg").replace("/etc/nats/", "");
        assert!(deploy_dir().join("nats").join(&conf).is_file(), "nats-{node}: {conf}");
    }
    assert!(deploy_dir().join("docker/Dockerfile").is_file());
}

#[test]
fn systemd_units_have_their_sections_and_real_binaries() {
    let dir = deploy_dir().join("systemd");
    let units: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(units.len(), 2, "{units:?}");
    for unit in units {
        let text = read(&unit);
        let mut section = String::new();
        let mut keys: BTreeMap<String, String> = BTreeMap::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if line.starts_with('[') {
                section = line.to_string();
            } else {
                let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("{}: bad line {line:?}", unit.display()));
                keys.insert(format!("{section}{k}"), v.to_string());
            }
        }
        for k in [
            "[Unit]Description",
            "[Service]ExecStart",
            "[Service]EnvironmentFile",
            "[Service]Restart",
            "[Install]WantedBy",
        ] {
            assert!(keys.contains_key(k), "{}: {k}", unit.display());
        }
        assert_eq!(keys.get("[Service]NoNewPrivileges").map(String::as_str), Some("yes"));
        let exec = &keys["[Service]ExecStart"];
        let bin = exec.split_whitespace().next().unwrap().rsplit('/').next().unwrap();
        flotilla_testkit::bin(bin); // panics when the workspace builds no such binary
        assert!(exec.contains("--config"), "{exec}");
    }
}
