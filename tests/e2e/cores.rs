//! `--worker-core`: the model worker on a core of its own, and no other thread of the server
//! there (read from the OS, /proc), while decisions are answered as before.

use serde_json::json;

use crate::server::Server;

/// The cores in a `Cpus_allowed_list` line ("0-3,8,10-11").
fn parse_cores(list: &str) -> Vec<usize> {
    list.trim()
        .split(',')
        .filter(|part| !part.is_empty())
        .flat_map(|part| match part.split_once('-') {
            Some((low, high)) => low.parse().unwrap()..=high.parse().unwrap(),
            None => part.parse().unwrap()..=part.parse().unwrap(),
        })
        .collect()
}

/// The cores a task (a process, or one of its threads) may run on.
fn cores_of(status: &str) -> Vec<usize> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc status");
    parse_cores(line)
}

/// Each thread of process `pid`: its name and its cores.
fn threads(pid: u32) -> Vec<(String, Vec<usize>)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/PID/task")
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            Some((name.trim().to_string(), cores_of(&status)))
        })
        .collect()
}

fn answers(server: &Server) {
    let reply = server.post(
        "/v1/decisions",
        &json!({
            "model": "smol",
            "input": "My parcel never arrived and I want my money back.",
            "questions": [{"type": "predicate", "instructions": "The customer asks for a refund."}]
        }),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[test]
fn a_reserved_core_holds_the_model_worker_alone() {
    assert_eq!(parse_cores("0-2,5,7-8"), [0, 1, 2, 5, 7, 8]);
    let allowed = cores_of(&std::fs::read_to_string("/proc/self/status").unwrap());
    if allowed.len() < 2 {
        eprintln!("one core only ({allowed:?}): nothing to reserve; skipped");
        return;
    }
    let core = *allowed.last().unwrap();
    let server = Server::ready(&["--worker-core", &core.to_string()]);
    answers(&server);
    let threads = threads(server.pid());
    let worker: Vec<_> = threads
        .iter()
        .filter(|(name, _)| name == "decide-model")
        .collect();
    assert_eq!(worker.len(), 1, "{threads:?}");
    assert_eq!(worker[0].1, [core], "the worker is on its core alone");
    let others: Vec<_> = threads
        .iter()
        .filter(|(name, _)| name != "decide-model")
        .collect();
    assert!(
        others.iter().any(|(name, _)| name == "decide-answers"),
        "{threads:?}"
    );
    for (name, cores) in &others {
        assert!(
            !cores.contains(&core),
            "thread {name} may run on the worker's core {core}: {cores:?}"
        );
        assert!(!cores.is_empty(), "thread {name} has no core");
    }

    // `auto` reserves nothing on the CPU, where the passes run on every core.
    let auto = Server::ready(&["--worker-core", "auto"]);
    answers(&auto);
    let threads = self::threads(auto.pid());
    let worker = threads
        .iter()
        .find(|(name, _)| name == "decide-model")
        .expect("a worker");
    assert_eq!(worker.1, allowed, "auto on the CPU: {threads:?}");

    // A core the process may not use fails the start, naming the setting.
    let refused = Server::start(&["--worker-core", "100000"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let health = refused.get("/health");
        if health.body["status"] == "failed" {
            let reason = health.body["reason"].as_str().unwrap();
            assert!(
                reason.contains("core 100000") && reason.contains("--worker-core"),
                "{reason}"
            );
            break;
        }
        assert_ne!(health.body["status"], "ok", "{}", health.body);
        assert!(std::time::Instant::now() < deadline, "{}", health.body);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
