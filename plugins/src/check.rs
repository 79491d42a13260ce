//! The checks a component passes before it serves, shared by every way in: a file of the
//! plugins directory, a tenant's upload, a rollback, and `decide plugin check`.
//!
//! One function runs them in order (size cap, compile and kind detection with the contract
//! version, linking, `info`, the kind a replacement must keep, the self-test) and returns a
//! [`CheckReport`] listing what the component is and every problem with its reason, so a
//! plugin developer sees locally exactly what an upload would answer.

use std::sync::Arc;

use serde::Serialize;

use super::plugin::{LoadStats, Plugin};
use super::runtime::{sha256_hex, PluginRuntime, SharedLimits};
use super::PluginKind;

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Which check: `size`, `load` (compile, kind, contract version, linking, `info`), `kind`
    /// or `self-test`.
    pub check: &'static str,
    /// Why it failed, in words that say what to change.
    pub reason: String,
}

/// What a component is and what is wrong with it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// The name it would be registered under.
    pub name: String,
    /// Its kind, once it loaded.
    pub kind: Option<PluginKind>,
    /// The `decide:plugin` contract version it exports, once it loaded.
    pub contract_version: Option<String>,
    /// The plugin's own version (its `info`), once it loaded.
    pub plugin_version: Option<String>,
    /// Its one-line description, once it loaded.
    pub description: Option<String>,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// Every failed check; empty when the component may serve.
    pub problems: Vec<Problem>,
}

impl CheckReport {
    /// The problems as one line (for logs and error messages).
    pub fn reasons(&self) -> String {
        self.problems
            .iter()
            .map(|p| match p.check {
                "self-test" => format!("self-test failed: {}", p.reason),
                _ => p.reason.clone(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// What a check is told besides the bytes.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// The largest component accepted, and what sets it (named in the problem).
    pub max_bytes: Option<(u64, String)>,
    /// The kind a replacement must keep: that of the plugin of this name it would replace.
    pub replaces: Option<PluginKind>,
    /// The limits its calls run under (a tenant's); `None`: the server's.
    pub limits: Option<Arc<SharedLimits>>,
}

/// Runs every check on `bytes` as plugin `name`. Returns the loaded plugin when all pass
/// (ready to swap in) and the report either way.
pub fn check_component(
    runtime: &Arc<PluginRuntime>,
    name: &str,
    bytes: &[u8],
    options: &CheckOptions,
) -> (Option<(Plugin, LoadStats)>, CheckReport) {
    let mut report = CheckReport {
        name: name.to_string(),
        sha256: sha256_hex(bytes),
        size: bytes.len() as u64,
        ..CheckReport::default()
    };
    if let Some((max, setting)) = &options.max_bytes {
        if report.size > *max {
            report.problems.push(Problem {
                check: "size",
                reason: format!(
                    "the component is {} bytes, over the limit of {max} bytes ({setting})",
                    report.size
                ),
            });
            return (None, report);
        }
    }
    let (plugin, stats) = match Plugin::load_limited(runtime, name, bytes, options.limits.clone()) {
        Ok(loaded) => loaded,
        Err(error) => {
            report.problems.push(Problem {
                check: "load",
                // wasmtime's parse errors span lines; one line reads better in a JSON error.
                reason: format!("{error:#}")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            });
            return (None, report);
        }
    };
    report.kind = Some(plugin.kind());
    report.contract_version = Some(plugin.contract_version().to_string());
    report.plugin_version = Some(plugin.info().version.clone());
    report.description = Some(plugin.info().description.clone());
    if let Some(existing) = options.replaces {
        if existing != plugin.kind() {
            report.problems.push(Problem {
                check: "kind",
                reason: format!(
                    "it is a {} plugin but `{name}` is a {existing} plugin; a replacement must be of the same kind",
                    plugin.kind()
                ),
            });
        }
    }
    if let Err(reason) = plugin.self_test() {
        report.problems.push(Problem {
            check: "self-test",
            reason,
        });
    }
    if report.problems.is_empty() {
        (Some((plugin, stats)), report)
    } else {
        (None, report)
    }
}
