//! The `decide` binary: `decide serve --model FILE`, `decide calibrate --model FILE [--questions FILE]`,
//! `decide tune --model FILE [--questions FILE] [--heldout FILE]`, `decide doctor --model FILE`, `decide eval --model FILE --questions FILE [--readouts ...] [--permute K]`,
//! `decide tenants {create,list,show,update,delete,keys} ... [--data-dir DIR]`,
//! `decide plugin check FILE.wasm`, `decide mcp --model FILE [--key KEY]` (MCP over stdio).

use clap::Parser;
use decide::config::{Cli, Command, PluginCommand};

/// mimalloc instead of glibc's malloc: tokenizing a long input allocates and frees a small
/// buffer per word on every core, and glibc spent ~30% of that time in malloc and free
/// (`perf` on `host_steps --loop template-long-cold`: a 28k-token input's template and
/// tokens took 11.1 ms a read on 2 cores with glibc, 8.2 ms with mimalloc).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Traces are exported by a serving process only (`--otlp-endpoint`).
    let otlp = match &cli.command {
        Command::Serve(config) => config.otlp_endpoint.as_deref(),
        _ => None,
    };
    let telemetry = decide::telemetry::init(otlp)?;
    let outcome = match cli.command {
        Command::Serve(config) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let grace = decide::drain::exit_grace(std::time::Duration::from_secs_f64(
                config.drain_timeout_s,
            ));
            let served = runtime.block_on(decide::server::serve(*config));
            // Threads still busy (a request's last plugin call, startup loading) are not
            // waited for beyond the grace: the stop must not outlast --drain-timeout-s. The
            // exporter's last batch goes out after the runtime stopped.
            runtime.shutdown_timeout(grace);
            served
        }
        Command::Calibrate(args) => decide::server::calibrate(*args),
        Command::Tune(args) => decide::server::tune(*args),
        Command::Doctor(config) => std::process::exit(decide::doctor::run(&config)),
        Command::Eval(args) => decide::eval::run(&args),
        Command::Mcp(args) => decide::mcp::stdio::run(*args),
        Command::Tenants(args) => std::process::exit(decide::tenancy::cli::run(&args)),
        Command::Plugin(PluginCommand::Check(args)) => {
            std::process::exit(decide::plugin_check::run(&args))
        }
    };
    telemetry.shutdown();
    outcome
}
