//! `decide plugin check FILE.wasm`: what an upload would answer, without a server.
//!
//! Runs [`check_component`], the very checks `PUT /v1/plugins/{name}` runs (size cap, kind,
//! contract version, precompile, linking, self-test), under the same kind of limits, and
//! prints what the plugin is and each problem with its reason. A name a built-in has must be
//! replaced by a plugin of the same kind, as on upload (the operator's plugins and the
//! tenant's own are not known here).

use std::time::Duration;

use crate::config::PluginCheckArgs;
use crate::plugins::builtin::BUILTIN_PLUGINS;
use crate::plugins::check::{check_component, CheckOptions, CheckReport};
use crate::plugins::{PluginRuntime, RuntimeConfig, MAX_COMPONENT_BYTES};

/// Runs the checks, prints the report and returns the exit code (0: no problems).
pub fn run(args: &PluginCheckArgs) -> i32 {
    let name = args.name.clone().unwrap_or_else(|| {
        args.file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin")
            .to_string()
    });
    let bytes = match std::fs::read(&args.file) {
        Ok(bytes) => bytes,
        Err(error) => {
            println!("cannot read {}: {error}", args.file.display());
            return 1;
        }
    };
    let config = RuntimeConfig {
        memory_limit_bytes: (args.plugin_memory_mib as usize).saturating_mul(1 << 20),
        call_timeout: Duration::from_millis(args.plugin_timeout_ms),
        // A developer's build changes every time: caching its artifacts only fills the disk.
        cache_dir: None,
        plugins_dir: None,
        poll_interval: Duration::from_secs(1),
    };
    let runtime = match PluginRuntime::new(config) {
        Ok(runtime) => runtime,
        Err(error) => {
            println!("cannot start the plugin runtime: {error:#}");
            return 1;
        }
    };
    let (max, setting) = if args.max_bytes > MAX_COMPONENT_BYTES {
        (MAX_COMPONENT_BYTES, "the server's largest plugin component")
    } else {
        (
            args.max_bytes,
            "--max-bytes, an upload's is the tenant's max_plugin_bytes",
        )
    };
    let options = CheckOptions {
        max_bytes: Some((max, setting.to_string())),
        replaces: BUILTIN_PLUGINS
            .iter()
            .find(|(builtin, _, _)| *builtin == name)
            .map(|(_, kind, _)| *kind),
        limits: None,
    };
    let (_, report) = check_component(&runtime, &name, &bytes, &options);
    print!("{}", render(&report, &args.file.display().to_string()));
    if report.problems.is_empty() {
        0
    } else {
        1
    }
}

/// The report as printed.
pub fn render(report: &CheckReport, file: &str) -> String {
    let unknown = || "(unknown: it did not load)".to_string();
    let mut out = String::new();
    out.push_str(&format!("file: {file}\n"));
    out.push_str(&format!("name: {}\n", report.name));
    out.push_str(&format!(
        "kind: {}\n",
        report.kind.map(|k| k.to_string()).unwrap_or_else(unknown)
    ));
    out.push_str(&format!(
        "contract version: {}\n",
        report
            .contract_version
            .as_ref()
            .map(|v| format!("decide:plugin@{v}"))
            .unwrap_or_else(unknown)
    ));
    out.push_str(&format!(
        "plugin version: {}\n",
        report.plugin_version.clone().unwrap_or_else(unknown)
    ));
    if let Some(description) = &report.description {
        out.push_str(&format!("description: {description}\n"));
    }
    out.push_str(&format!("sha256: {}\n", report.sha256));
    out.push_str(&format!("size: {} bytes\n", report.size));
    if report.problems.is_empty() {
        out.push_str("ok: every check passed (size, load, kind, self-test)\n");
    } else {
        out.push_str(&format!("problems: {}\n", report.problems.len()));
        for problem in &report.problems {
            out.push_str(&format!("- {}: {}\n", problem.check, problem.reason));
        }
    }
    out
}
