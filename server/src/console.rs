//! `/console`: the web console, static files compiled into the binary.
//!
//! This module owns the console's routes and nothing else: three files (`server/console/`:
//! `index.html`, `console.js`, `console.css`) embedded with `include_str!`, so a release
//! binary serves them with no Node build, no files on disk and no network. The page is a
//! client of the public HTTP API only: it asks with the key the person types in (kept in
//! `sessionStorage` at most), so it can do nothing the API would refuse that key, and the
//! routes here need no key themselves (they are the same bytes for everyone).
//!
//! The console's routes are not in `/openapi.json`: that document describes the JSON API
//! (its request and response bodies, statuses and security), which is what SDKs,
//! contract tests and schemathesis read; an HTML page and its script are not operations a
//! client calls, and listing them would make schemathesis test static files against JSON
//! schemas. Anything else under `/console/` is the API's JSON 404, and a method other than
//! GET or HEAD its JSON 405, like every other path.
//!
//! Each response carries a Content-Security-Policy that allows scripts, styles and requests
//! from this origin only (no inline script, no other host), so a page holding an admin key
//! cannot be made to send it elsewhere; `nosniff`, `no-referrer` and `frame-ancestors
//! 'none'` keep it from being framed or its key leaking in a Referer.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::state::SharedState;

/// The path of the console's page.
pub const PATH: &str = "/console";

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const STYLE: &str = include_str!("../console/console.css");

/// Only this origin; no inline script; images may be `data:` (none are, today).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes (GET, and HEAD through axum's GET).
pub fn routes() -> Router<SharedState> {
    Router::new()
        .route(
            PATH,
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

/// One embedded file. `no-cache` (revalidate every time) rather than a long max-age: the
/// files change with the binary, and a console that runs an old script against a new API
/// would show wrong things.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        // Every script and stylesheet the page names is one of ours, by absolute path (the
        // page is served at /console and /console/ alike), and nothing names another host.
        assert!(INDEX.contains(r#"src="/console/console.js""#));
        assert!(INDEX.contains(r#"href="/console/console.css""#));
        for file in [INDEX, SCRIPT, STYLE] {
            // The SVG namespace is a name, not a place the page fetches from.
            let file = file.replace("http://www.w3.org/2000/svg", "");
            assert!(!file.contains("http://") && !file.contains("https://"));
        }
        assert!(
            !INDEX.contains("<script>"),
            "no inline script: the policy forbids it"
        );
    }
}
