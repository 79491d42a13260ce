//! The `decide` binary: `decide serve --model FILE`, `decide calibrate --model FILE [--questions FILE]`,
//! `decide tune --model FILE [--questions FILE] [--heldout FILE]`, `decide doctor --model FILE`, `decide eval --model FILE --questions FILE [--readouts ...] [--permute K]`,
//! `decide tenants {create,list,show,update,delete,keys} ... [--data-dir DIR]`,
//! `decide plugin check FILE.wasm`, `decide mcp --model FILE [--key KEY]` (MCP over stdio).
//!
//! This crate is the command line only: its subcommands and their dispatch. Each runs code of
//! the server crate (`decide-server`), whose flags (`Config` and the commands' arguments) it
//! parses.

use clap::{Parser, Subcommand};
use decide_server::config::{
    CalibrateArgs, Config, EvalArgs, McpArgs, PluginCheckArgs, TenantsArgs, TuneArgs,
};

/// mimalloc instead of glibc's malloc: tokenizing a long input allocates and frees a small
/// buffer per word on every core, and glibc spent ~30% of that time in malloc and free
/// (`perf` on `host_steps --loop template-long-cold`: a 28k-token input's template and
/// tokens took 11.1 ms a read on 2 cores with glibc, 8.2 ms with mimalloc).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `decide`: typed decisions from a language model's next-token probabilities.
#[derive(Debug, Parser)]
#[command(name = "decide", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What the binary does.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (`/v1/decisions`, `/v1/systemone`, `/v1/systemone/batch`, `/v1/classify`,
    /// `/v1/fields`, `/v1/models`, `/health`, `/metrics`).
    Serve(Box<Config>),
    /// Run startup calibration offline: read the question file through the model, fit, print
    /// the report and save the result where `serve` reuses it.
    Calibrate(Box<CalibrateArgs>),
    /// Measure which prompt setup (renderer x label scheme x readout) answers a labelled
    /// question set best on this model, keep it only by a clear accuracy gain over the
    /// default, and save it where `serve` reuses it; with --heldout, score every setup x
    /// calibration policy on a held-out file too.
    Tune(Box<TuneArgs>),
    /// Check a model without serving: load it, report the template's answer slot, the
    /// readouts' capacities and the self-check; exit non-zero with the reason when the model
    /// cannot serve decisions.
    Doctor(Box<Config>),
    /// Measure readouts on a labelled question file: accuracy per readout, agreement between
    /// readouts, and (with --permute K) how often the top answer changes under K option orders.
    Eval(Box<EvalArgs>),
    /// Manage tenants and their API keys in the store of `--data-dir`, without HTTP (the same
    /// operations as the admin API; safe while a server runs on that directory). Prints JSON.
    Tenants(Box<TenantsArgs>),
    /// Serve the Model Context Protocol on stdin/stdout for a local agent: the tools `decide`,
    /// `classify` and one per question type, answered by a model loaded in this process with
    /// `serve`'s flags, as the caller of `--key`.
    Mcp(Box<McpArgs>),
    /// Plugin developer tools: `decide plugin check FILE.wasm`.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

/// `decide plugin ...`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Run the checks and self-test an upload runs (size cap, kind, contract version,
    /// precompile, self-test) and print what the plugin is and each problem with its reason;
    /// exit 1 on problems.
    Check(PluginCheckArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Traces are exported by a serving process only (`--otlp-endpoint`).
    let otlp = match &cli.command {
        Command::Serve(config) => config.otlp_endpoint.as_deref(),
        _ => None,
    };
    let telemetry = decide_server::telemetry::init(otlp)?;
    let outcome = match cli.command {
        Command::Serve(config) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let grace = decide_server::drain::exit_grace(std::time::Duration::from_secs_f64(
                config.drain_timeout_s,
            ));
            let served = runtime.block_on(decide_server::server::serve(*config));
            // Threads still busy (a request's last plugin call, startup loading) are not
            // waited for beyond the grace: the stop must not outlast --drain-timeout-s. The
            // exporter's last batch goes out after the runtime stopped.
            runtime.shutdown_timeout(grace);
            served
        }
        Command::Calibrate(args) => decide_server::server::calibrate(*args),
        Command::Tune(args) => decide_server::server::tune(*args),
        Command::Doctor(config) => std::process::exit(decide_server::doctor::run(&config)),
        Command::Eval(args) => decide_server::eval::run(&args),
        Command::Mcp(args) => decide_server::mcp::stdio::run(*args),
        Command::Tenants(args) => std::process::exit(decide_server::tenancy::cli::run(&args)),
        Command::Plugin(PluginCommand::Check(args)) => {
            std::process::exit(decide_server::plugin_check::run(&args))
        }
    };
    telemetry.shutdown();
    outcome
}
