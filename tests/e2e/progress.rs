//! Progress of long work: the log has a line when each step starts, one every
//! `--progress-every-s` while it runs (with its counts, rate and ETA) and one when it ends;
//! `/health` shows the running tasks with done, total, rate and ETA (a tenant's calibration
//! without the tenant's id).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::server::{scratch_dir, Server};
use crate::tenant_calibration::{labelled_questions, put_questions};
use crate::tenant_fixture::seed_tenant;

fn lines_with<'l>(log: &'l [String], text: &str) -> Vec<&'l String> {
    log.iter().filter(|line| line.contains(text)).collect()
}

#[test]
fn long_work_logs_progress_with_an_eta_and_shows_it_at_health() {
    let data = scratch_dir("progress");
    let tenant = seed_tenant(&data, "progress", Default::default());
    let server = Server::start_logged(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--progress-every-s",
        "0.2",
    ]);
    // While loading, whatever /health shows of the tasks has their figures.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let health = server.get("/health");
        if health.status == 200 {
            break;
        }
        assert_ne!(health.body["status"], "failed", "{}", health.body);
        for task in health.body["progress"].as_array().expect("progress") {
            assert!(
                task["done"].is_u64() && task["elapsed_s"].is_f64(),
                "{task}"
            );
        }
        assert!(Instant::now() < deadline, "not ready: {}", health.body);
        std::thread::sleep(Duration::from_millis(20));
    }
    // Ready comes after the self-check's last line; the test's copy of the log may lag.
    let log = server.log_once_it_has(
        "progress: answer-slot self-check finished: ",
        Duration::from_secs(10),
    );
    let loaded = lines_with(&log, "progress: loading the model finished: ");
    assert_eq!(loaded.len(), 1, "{log:#?}");
    // SmolLM2's tensors: about 100 MiB in the file, all of it read.
    let counts = loaded[0]
        .split("finished: ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .expect("MiB counts");
    let (done, total) = counts.split_once('/').expect("done/total");
    assert_eq!(done, total, "{}", loaded[0]);
    assert!(total.parse::<u64>().unwrap() > 50, "{}", loaded[0]);
    assert_eq!(
        lines_with(&log, "progress: loading the model started").len(),
        1
    );
    assert_eq!(
        lines_with(&log, "progress: answer-slot self-check finished: 1/").len(),
        1,
        "{log:#?}"
    );
    assert_eq!(server.get("/health").body["progress"], Value::Array(vec![]));

    // A tenant's calibration: /health shows it while it runs, without the tenant's id.
    let started = put_questions(&server, &tenant.key, labelled_questions(60));
    assert_eq!(started.status, 202, "{}", started.body);
    let mut seen: Vec<Value> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let health = server.get("/health");
        assert!(
            !health.body.to_string().contains(&tenant.id),
            "{}",
            health.body
        );
        seen.extend(
            health.body["progress"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["task"] == "tenant calibration")
                .cloned(),
        );
        let status = server.send_as("GET", "/v1/calibration", &tenant.key, None);
        if status.body["status"] != "running" {
            assert_eq!(status.body["status"], "done", "{}", status.body);
            break;
        }
        assert!(Instant::now() < deadline, "{}", status.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !seen.is_empty(),
        "/health never showed the tenant's calibration"
    );
    for task in &seen {
        assert_eq!(task["unit"], "questions", "{task}");
        assert_eq!(task["total"], 60, "{task}");
    }
    let with_eta = seen
        .iter()
        .find(|t| t["done"].as_u64().unwrap() > 0)
        .unwrap_or_else(|| panic!("no snapshot with questions done: {seen:?}"));
    assert!(with_eta["eta_s"].as_f64().is_some(), "{with_eta}");
    assert!(with_eta["rate_per_s"].as_f64().unwrap() > 0.0, "{with_eta}");

    // The log names the tenant, every 0.2 s while it ran, with the ETA.
    let of_tenant = format!("progress: tenant calibration of {}", tenant.id);
    let log = server.log_once_it_has(
        &format!("{of_tenant} finished: 60/60"),
        Duration::from_secs(5),
    );
    let running = lines_with(&log, &format!("{of_tenant} running: "));
    assert!(!running.is_empty(), "{log:#?}");
    assert!(
        running.iter().any(|line| line.contains(", ETA ")),
        "{running:#?}"
    );
}
