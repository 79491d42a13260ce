//! `decide mcp`: the MCP server over stdio, for an agent that starts decide as its own
//! subprocess.
//!
//! The process is the engine: it takes the same flags as `decide serve` (model, plugins,
//! data dir, limits, ...; `--host`/`--port` are unused), loads the model and plugins in
//! process, and answers MCP on stdin/stdout once ready (the log goes to stderr). Its calls are
//! made as the caller of `--key` (`DECIDE_MCP_KEY`), authenticated by the tenant store of
//! `--data-dir` with the HTTP API's rules: no key and no tenants is the default tenant (as a
//! server without `--api-key`), a tenant's key is that tenant (its plugins, settings, limits
//! and usage), the operator's `--api-key` the default tenant. A key that would get 401 on the
//! HTTP API stops the process at start with the same message, and one revoked later fails
//! the calls after it.

use std::sync::Arc;

use anyhow::Context;
use rmcp::ServiceExt;

use super::DecideMcp;
use crate::config::McpArgs;
use crate::metrics::Metrics;
use crate::state::AppState;

/// Runs `decide mcp` until the client closes stdin.
pub fn run(args: McpArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: McpArgs) -> anyhow::Result<()> {
    let McpArgs { key, config } = args;
    let directory = Arc::new(crate::server::open_directory(&config)?);
    let state = AppState::new(config, Arc::new(Metrics::default()), directory);
    let loader = state.clone();
    tokio::task::spawn_blocking(move || crate::server::load(&loader))
        .await
        .context("loading the model and plugins")?;
    state.engine().map_err(|error| anyhow::anyhow!("{error}"))?;
    let handler = DecideMcp::with_key(state.clone(), key.as_deref())?;
    if let super::Credentials::Key(headers) = &handler.credentials {
        crate::frontends::caller_of(&state, headers)
            .map_err(|error| anyhow::anyhow!("{error} (setting --key / DECIDE_MCP_KEY)"))?;
    }
    tracing::info!("serving MCP on stdio");
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the MCP session on stdio")?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "the MCP session ended");
    Ok(())
}
