//! decide as a Model Context Protocol server, on the official Rust SDK (`rmcp`): `decide mcp`
//! over stdio for a local agent ([`stdio`]), and streamable HTTP at `/mcp` on the running
//! server ([`http`]).
//!
//! This module owns the MCP surface only: which tools a caller sees ([`tools`]: `decide`,
//! `classify`, and one per question type the caller has, each with a JSON Schema from
//! [`schemas`]) and how a tool call becomes a request. It owns no decision logic: `decide` and
//! `classify` run the same code as `/v1/systemone` and `/v1/classify`
//! ([`crate::frontends::systemone::answer`], [`crate::frontends::classify::answer`]), a
//! per-type tool is one question through the same pipeline ([`typed`]), under the same caller,
//! limits and usage as the HTTP API ([`crate::frontends::for_caller`]). The same body gives
//! the same probabilities and the same error messages on every transport.
//!
//! Errors follow the MCP spec: a tool that ran and failed (an invalid question, a limit, a
//! deadline) is a result with `isError: true` whose text is the HTTP API's message and whose
//! structured content is the HTTP API's Jev error body plus its `status`; an unknown tool is a
//! JSON-RPC error. On `/mcp` a missing or wrong key is refused before MCP is spoken, with the
//! HTTP API's 401.

pub mod http;
pub mod schemas;
pub mod stdio;
pub mod tools;
pub mod typed;

use axum::http::HeaderMap;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::error::{ApiError, Wire};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// Who a session's calls are made as.
#[derive(Clone)]
enum Credentials {
    /// Streamable HTTP: each request's caller, authenticated by [`http`]'s guard from its
    /// `Authorization: Bearer` key and carried in the request's extensions.
    PerRequest,
    /// stdio: the `--key` of `decide mcp`, authenticated again on every call (a revoked key
    /// stops working mid-session, as on the HTTP API).
    Key(HeaderMap),
}

/// The MCP server of one session (stdio) or one request (streamable HTTP, stateless).
#[derive(Clone)]
pub struct DecideMcp {
    state: SharedState,
    credentials: Credentials,
}

impl DecideMcp {
    /// The handler of `/mcp`, whose callers come with each HTTP request.
    pub fn over_http(state: SharedState) -> DecideMcp {
        DecideMcp {
            state,
            credentials: Credentials::PerRequest,
        }
    }

    /// The handler of a stdio session that presents `key` (none: no key, as a request without
    /// an `Authorization` header).
    pub fn with_key(state: SharedState, key: Option<&str>) -> anyhow::Result<DecideMcp> {
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            headers.insert(
                axum::http::header::AUTHORIZATION,
                format!("Bearer {key}").parse().map_err(|_| {
                    anyhow::anyhow!(
                        "the key is not valid header text (setting --key / DECIDE_MCP_KEY)"
                    )
                })?,
            );
        }
        Ok(DecideMcp {
            state,
            credentials: Credentials::Key(headers),
        })
    }

    /// The caller of a request: the one the HTTP guard authenticated, or the session's key.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ApiError> {
        match &self.credentials {
            Credentials::Key(headers) => crate::frontends::caller_of(&self.state, headers),
            Credentials::PerRequest => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| {
                    ApiError::Internal("an MCP request over HTTP came without its caller".into())
                }),
        }
    }
}

impl ServerHandler for DecideMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("decide", env!("CARGO_PKG_VERSION"))
                    .with_title("decide: typed decisions"),
            )
            .with_instructions(
                "Typed decisions read from a language model's next-token probabilities: \
                 `decide` answers typed questions about a state (yes/no, a choice, a score) \
                 with calibrated probabilities, `classify` fills a closed JSON Schema, and each \
                 other tool asks one question of its type. Every answer carries its \
                 probabilities and an audit of how it was read.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = self.caller(&context).map_err(protocol_error)?;
        let engine = self.state.engine().map_err(protocol_error)?;
        let mut result =
            ListToolsResult::with_all_items(tools::catalogue(&self.state, &engine, &caller));
        // A caller's tools change as its plugins do, and are its own.
        result.ttl_ms = Some(0);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = async {
            let caller = self.caller(&context)?;
            crate::frontends::for_caller(&self.state, caller, |caller| async move {
                tools::call(&self.state, &caller, &request.name, &arguments).await
            })
            .await
        };
        // A cancelled request (the client's notifications/cancelled, or its HTTP connection
        // gone) drops the call, which cancels its model work as a closed HTTP request does.
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = context.ct.cancelled() => return Err(McpError::internal_error("the request was cancelled", None)),
        };
        Ok(match outcome {
            Ok(tools::Called::Answer { text, structured }) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(structured);
                result.into()
            }
            Ok(tools::Called::UnknownTool(message)) => {
                return Err(McpError::invalid_params(message, None))
            }
            Err(error) => tool_error(&error).into(),
        })
    }
}

/// A failed tool call as MCP's tool error: the HTTP API's message as text, its Jev error body
/// and status as structured content.
fn tool_error(error: &ApiError) -> CallToolResult {
    let mut body = error.body_for(Wire::SystemOne);
    body["status"] = json!(error.status(Wire::SystemOne).as_u16());
    if let Some(seconds) = error.retry_after_s() {
        body["retry_after_s"] = json!(seconds);
    }
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
    result.structured_content = Some(body);
    result
}

/// An error of a request that is not a tool call (listing tools) as a JSON-RPC error with the
/// HTTP API's message.
fn protocol_error(error: ApiError) -> McpError {
    let data = Some(error.body_for(Wire::SystemOne));
    McpError::internal_error(error.to_string(), data)
}
