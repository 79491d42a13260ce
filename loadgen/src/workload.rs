//! The workload file: what a run sends, parsed and serialized once before the clock starts.
//!
//! JSONL, one request a line:
//! `{"method": "POST", "path": "/v1/decisions", "body": {...}, "decisions": 1, "group": "g",
//! "headers": {"x-a": "b"}}`. Only `path` is required. Lines that share a `group` form one
//! *unit*, sent concurrently and timed until its last response (vLLM's per-question requests over
//! one shared prefix); a line without a group is a unit of its own. Units keep the order of their
//! first line, and a run takes them round-robin. `decisions` (default 1) is how many decisions a
//! successful request carries (decide's one request with 64 questions carries 64), so decisions/s
//! compare across servers that batch differently. The body is any JSON value, serialized here
//! once into `Bytes` so that sending costs no serialization; without `body` a request has none.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use crate::Error;

/// One workload line as written in the file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    /// Default: POST with a body, GET without.
    method: Option<String>,
    path: String,
    body: Option<serde_json::Value>,
    #[serde(default = "one")]
    decisions: u64,
    group: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

fn one() -> u64 {
    1
}

/// One request, ready to send: everything but the server's address.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// Path and query, starting with `/`.
    pub path: String,
    /// The line's headers, plus `content-type: application/json` for a body without one.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Decisions this request carries when it succeeds.
    pub decisions: u64,
}

/// Requests sent together and timed as one (a `group`, or a single line).
#[derive(Debug, Clone)]
pub struct Unit {
    /// The group's name; `None` for a line without one.
    pub group: Option<String>,
    pub requests: Vec<Request>,
}

impl Unit {
    /// Decisions the unit carries when every request succeeds.
    pub fn decisions(&self) -> u64 {
        self.requests.iter().map(|r| r.decisions).sum()
    }
}

/// A parsed workload file.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Request lines (blank lines are not counted).
    pub lines: usize,
    /// Units in the order of their first line.
    pub units: Vec<Unit>,
}

impl Workload {
    /// Reads and parses a workload file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadWorkload {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses workload text; an error names the 1-based line and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut units: Vec<Unit> = Vec::new();
        let mut group_index: HashMap<String, usize> = HashMap::new();
        let mut lines = 0;
        for (index, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let number = index + 1;
            let fail = |message: String| Error::Line {
                line: number,
                message,
            };
            let line: Line = serde_json::from_str(raw).map_err(|e| fail(json_error(&e)))?;
            lines += 1;
            let group = line.group.clone();
            let request = request(line).map_err(fail)?;
            match group {
                None => units.push(Unit {
                    group: None,
                    requests: vec![request],
                }),
                Some(name) => match group_index.get(&name) {
                    Some(&at) => units[at].requests.push(request),
                    None => {
                        group_index.insert(name.clone(), units.len());
                        units.push(Unit {
                            group: Some(name),
                            requests: vec![request],
                        });
                    }
                },
            }
        }
        if units.is_empty() {
            return Err(Error::EmptyWorkload);
        }
        Ok(Workload { lines, units })
    }

    /// The most requests any unit sends at once: the connections one closed-loop client needs.
    pub fn widest_unit(&self) -> usize {
        self.units
            .iter()
            .map(|u| u.requests.len())
            .max()
            .unwrap_or(1)
    }
}

/// serde_json's message with its position in the file's line, not in the one-line document it
/// parsed (which is always "line 1").
fn json_error(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let text = message
        .rfind(" at line ")
        .map_or(message.as_str(), |at| &message[..at]);
    format!("{text} (column {})", error.column())
}

/// Checks one line and serializes its body.
fn request(line: Line) -> Result<Request, String> {
    if !line.path.starts_with('/') {
        return Err(format!("path {:?} must start with '/'", line.path));
    }
    let method = match &line.method {
        Some(name) => Method::from_bytes(name.as_bytes())
            .map_err(|_| format!("method {name:?} is not an HTTP method"))?,
        None if line.body.is_some() => Method::POST,
        None => Method::GET,
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &line.headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("header {name}'s value {value:?} is not valid"))?;
        headers.append(header, value);
    }
    let body = match &line.body {
        Some(value) => {
            if !headers.contains_key(CONTENT_TYPE) {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Bytes::from(serde_json::to_vec(value).map_err(|e| e.to_string())?)
        }
        None => Bytes::new(),
    };
    Ok(Request {
        method,
        path: line.path,
        headers,
        body,
        decisions: line.decisions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_form_units_in_order_of_first_line() {
        let text = r#"
{"path": "/v1/a", "body": {"q": 1}, "group": "g1", "decisions": 1}
{"path": "/health"}
{"path": "/v1/a", "body": {"q": 2}, "group": "g1"}

{"path": "/v1/b", "body": [1, 2], "group": "g2", "decisions": 64}
{"path": "/v1/a", "body": {"q": 3}, "group": "g1"}
"#;
        let workload = Workload::parse(text).unwrap();
        assert_eq!(workload.lines, 5);
        let shape: Vec<(Option<&str>, usize, u64)> = workload
            .units
            .iter()
            .map(|u| (u.group.as_deref(), u.requests.len(), u.decisions()))
            .collect();
        assert_eq!(
            shape,
            vec![(Some("g1"), 3, 3), (None, 1, 1), (Some("g2"), 1, 64)]
        );
        assert_eq!(workload.widest_unit(), 3);
        let first = &workload.units[0].requests[0];
        assert_eq!(first.method, Method::POST);
        assert_eq!(&first.body[..], br#"{"q":1}"#);
        assert_eq!(first.headers[CONTENT_TYPE], "application/json");
        let health = &workload.units[1].requests[0];
        assert_eq!(health.method, Method::GET);
        assert!(health.body.is_empty());
        assert!(health.headers.is_empty());
    }

    #[test]
    fn explicit_method_and_headers_are_kept() {
        let text = r#"{"method": "PUT", "path": "/x?y=1", "body": "s", "headers": {"content-type": "text/plain", "x-k": "v"}}"#;
        let workload = Workload::parse(text).unwrap();
        let request = &workload.units[0].requests[0];
        assert_eq!(request.method, Method::PUT);
        assert_eq!(request.path, "/x?y=1");
        assert_eq!(request.headers[CONTENT_TYPE], "text/plain");
        assert_eq!(request.headers["x-k"], "v");
        assert_eq!(&request.body[..], br#""s""#);
    }

    fn line_error(text: &str) -> (usize, String) {
        match Workload::parse(text) {
            Err(Error::Line { line, message }) => (line, message),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn bad_lines_name_their_line_number() {
        let good = r#"{"path": "/a"}"#;
        let (line, _) = line_error(&format!("{good}\n\n{{not json\n{good}"));
        assert_eq!(line, 3);
        let (line, message) = line_error(&format!("{good}\n{{\"path\": \"/a\", \"bogy\": 1}}"));
        assert_eq!(line, 2);
        assert!(message.contains("bogy"), "{message}");
        assert!(message.ends_with("(column 21)"), "{message}");
        assert!(!message.contains("line 1"), "{message}");
        let (line, message) = line_error(r#"{"path": "v1/decisions"}"#);
        assert_eq!(line, 1);
        assert!(message.contains("must start with '/'"), "{message}");
        let (_, message) = line_error(r#"{"path": "/a", "method": "GE T"}"#);
        assert!(message.contains("not an HTTP method"), "{message}");
        let (_, message) = line_error(r#"{"path": "/a", "decisions": -1}"#);
        assert!(message.contains("invalid value"), "{message}");
        let (_, message) = line_error(r#"{"body": {}}"#);
        assert!(message.contains("path"), "{message}");
        let (_, message) = line_error(r#"{"path": "/a", "headers": {"bad header": "v"}}"#);
        assert!(message.contains("bad header"), "{message}");
    }

    #[test]
    fn an_empty_workload_is_an_error() {
        assert!(matches!(
            Workload::parse("\n  \n"),
            Err(Error::EmptyWorkload)
        ));
    }
}
