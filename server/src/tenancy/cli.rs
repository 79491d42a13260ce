//! `decide tenants ...`: tenant administration for operators without HTTP.
//!
//! Each command opens the store of `--data-dir` (the one `serve` uses), turns its flags into
//! the admin API's JSON body and calls the same [`super::admin`] operation, so the CLI and the
//! API accept, refuse and write exactly the same things. The store is SQLite in WAL mode: the
//! CLI may run while a server serves that directory, and the server's directory notices the
//! change within [`super::directory::RECHECK`].
//!
//! Output is JSON on stdout. Exit codes: 0 done; 2 bad input (the message on stderr names
//! the field, as the API's 4xx would); 1 the store failed.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::admin;
use super::store::Store;
use crate::config::{resolve_data_dir, KeysCommand, TenantsArgs, TenantsCommand};
use crate::error::ApiError;

/// Why a command failed, and its exit code.
struct Failure {
    code: i32,
    message: String,
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Self {
        let code = match error {
            ApiError::Internal(_) => 1,
            _ => 2,
        };
        Failure {
            code,
            message: error.to_string(),
        }
    }
}

/// Runs one `decide tenants` command; returns the process's exit code.
pub fn run(args: &TenantsArgs) -> i32 {
    match execute(args) {
        Ok(output) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&output).unwrap_or_default()
            );
            0
        }
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            failure.code
        }
    }
}

fn execute(args: &TenantsArgs) -> Result<Value, Failure> {
    let dir = resolve_data_dir(args.data_dir.as_deref());
    let store: Arc<dyn Store> = super::open_store(args.store.as_deref(), &dir)
        .map_err(|message| Failure { code: 1, message })?;
    let store = store.as_ref();
    match &args.command {
        TenantsCommand::Create {
            name,
            limits,
            settings,
        } => {
            let body = body(Some(name), limits, settings)?;
            to_json(admin::create_tenant(store, &body)?)
        }
        TenantsCommand::List => Ok(json!({"tenants": admin::list_tenants(store)?})),
        TenantsCommand::Show { id } => to_json(admin::get_tenant(store, id)?),
        TenantsCommand::Update {
            id,
            name,
            limits,
            settings,
        } => {
            let body = body(name.as_ref(), limits, settings)?;
            to_json(admin::update_tenant(store, id, &body)?)
        }
        TenantsCommand::Delete { id } => {
            admin::delete_tenant(store, id)?;
            Ok(json!({"id": id, "deleted": true}))
        }
        TenantsCommand::Keys(KeysCommand::Create { id }) => to_json(admin::create_key(store, id)?),
        TenantsCommand::Keys(KeysCommand::List { id }) => {
            Ok(json!({"keys": admin::list_keys(store, id)?}))
        }
        TenantsCommand::Keys(KeysCommand::Revoke { id, key_id }) => {
            to_json(admin::revoke_key(store, id, key_id)?)
        }
    }
}

fn to_json(value: impl Serialize) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|e| Failure {
        code: 1,
        message: e.to_string(),
    })
}

/// The admin API's body from the flags given (only those: update has PATCH semantics).
fn body(
    name: Option<&String>,
    limits: &Option<String>,
    settings: &Option<String>,
) -> Result<Value, Failure> {
    let mut body = Map::new();
    if let Some(name) = name {
        body.insert("name".into(), Value::String(name.clone()));
    }
    for (field, text) in [("limits", limits), ("settings", settings)] {
        if let Some(text) = text {
            let value: Value = serde_json::from_str(text).map_err(|e| Failure {
                code: 2,
                message: format!(
                    "--{field}: not valid JSON ({e}); pass an object such as '{{\"weight\": 2}}'"
                ),
            })?;
            body.insert(field.into(), value);
        }
    }
    Ok(Value::Object(body))
}
