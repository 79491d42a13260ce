//! The operations of tenant administration, shared by the HTTP admin API
//! ([`super::admin_http`]) and the `decide tenants` CLI ([`super::cli`]).
//!
//! Both front doors hand this module the same JSON bodies (the CLI builds them from its
//! flags), so validation, its messages and the records written are one code path: a limit
//! refused over HTTP is refused with the same words on the command line. Bodies are walked
//! as `serde_json::Value`s rather than derived, so every error names the exact field
//! (`limits.requests_per_minute`) and the rule it breaks.
//!
//! Updates have PATCH semantics: a field given replaces the stored one, a field left out is
//! kept, and `null` clears a limit or setting (back to the server-wide default); `"limits":
//! null` clears them all. Keys are created here: the key itself is returned once, in
//! [`NewKey`], and only its SHA-256 is stored.

use serde::Serialize;
use serde_json::{Map, Value};

use super::keys;
use super::store::{KeyRecord, Store, StoreError, Tenant, TenantLimits, TenantSettings};
use crate::error::{ApiError, Loc};
use crate::frontends::json::{at, invalid, object, only_fields, required, type_name};
use crate::loc;

/// Longest tenant name, in characters.
pub const MAX_NAME_CHARS: usize = 128;

/// Largest fair-share weight (`settings.weight`); weights are relative, and a cap keeps one
/// tenant from being handed every round.
pub const MAX_WEIGHT: u64 = 1000;

/// Longest plugin name in a setting (`settings.renderer`, `settings.calibration`).
pub const MAX_PLUGIN_NAME_CHARS: usize = 128;

/// Fields of a tenant body (create and update).
const TENANT_FIELDS: &[&str] = &["name", "limits", "settings"];

/// A key as created: the only time the key itself is seen.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NewKey {
    /// `key_...`: what revoking names.
    pub id: String,
    pub tenant_id: String,
    /// The whole key (`dk_...`): shown once, never stored.
    pub key: String,
    /// Its first characters, as key lists show them.
    pub prefix: String,
    pub created_at: u64,
}

/// A store failure as an API error: a conflict is the caller's (409), anything else ours.
fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::Conflict(message) => ApiError::Conflict {
            message: format!("name: {message}; choose another name"),
        },
        other => ApiError::Internal(other.to_string()),
    }
}

fn no_tenant(id: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("no tenant has the id `{id}` (GET /admin/v1/tenants lists them)"),
    }
}

/// A tenant name: 1 to [`MAX_NAME_CHARS`] characters, not blank, printable (no control or
/// bidirectional-text control characters: it is shown to operators).
fn name(value: &Value) -> Result<String, ApiError> {
    let loc = loc!["name"];
    let Value::String(text) = value else {
        return Err(invalid(
            &loc,
            format!("expected a string, got {}", type_name(value)),
        ));
    };
    let chars = text.chars().count();
    if text.trim().is_empty() || chars > MAX_NAME_CHARS {
        return Err(invalid(
            &loc,
            format!("must be 1 to {MAX_NAME_CHARS} characters, not blank (got {chars})"),
        ));
    }
    if let Some(why) = crate::frontends::json::unprintable(text) {
        return Err(invalid(&loc, why));
    }
    Ok(text.clone())
}

/// Checks that `field` is one of `T`'s fields, letting serde say which fields exist: the
/// records' own `deny_unknown_fields` is the one list of what is accepted.
fn known_field<T: serde::de::DeserializeOwned>(field: &str, loc: &Loc) -> Result<(), ApiError> {
    let probe = Value::Object(Map::from_iter([(field.to_string(), Value::Null)]));
    serde_json::from_value::<T>(probe)
        .map(|_| ())
        .map_err(|error| ApiError::Invalid {
            loc: loc.clone(),
            message: format!("{}: {error}", crate::error::dotted(loc)),
            kind: "extra_forbidden",
        })
}

/// `patch` applied to `current` (both JSON objects of a record's fields): a value replaces,
/// `null` removes; each given value checked by `check` first.
fn merge<T>(
    current: &T,
    patch: &Value,
    loc: &Loc,
    check: impl Fn(&str, &Value, &Loc) -> Result<(), ApiError>,
) -> Result<T, ApiError>
where
    T: Serialize + serde::de::DeserializeOwned + Default,
{
    if patch.is_null() {
        return Ok(T::default());
    }
    let patch = object(patch, loc)?;
    let mut merged = match serde_json::to_value(current) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for (field, value) in patch {
        let field_loc = at(loc, field.as_str());
        known_field::<T>(field, &field_loc)?;
        if value.is_null() {
            merged.remove(field);
        } else {
            check(field, value, &field_loc)?;
            merged.insert(field.clone(), value.clone());
        }
    }
    serde_json::from_value(Value::Object(merged))
        .map_err(|error| invalid(loc, format!("is not valid: {error}")))
}

/// Every limit is a non-negative integer (or `null`, handled before).
fn check_limit(_field: &str, value: &Value, loc: &Loc) -> Result<(), ApiError> {
    if value.as_u64().is_some() {
        return Ok(());
    }
    Err(invalid(
        loc,
        format!(
            "must be a non-negative integer (or null for the server's default), got {}",
            crate::frontends::json::compact(value)
        ),
    ))
}

/// `weight` is an integer in 1..=[`MAX_WEIGHT`]; plugin names are short non-blank strings.
fn check_setting(field: &str, value: &Value, loc: &Loc) -> Result<(), ApiError> {
    match field {
        "weight" => match value.as_u64() {
            Some(weight) if (1..=MAX_WEIGHT).contains(&weight) => Ok(()),
            _ => Err(invalid(
                loc,
                format!(
                    "must be an integer from 1 to {MAX_WEIGHT} (or null for 1), got {}",
                    crate::frontends::json::compact(value)
                ),
            )),
        },
        "min_option_mass" => match value.as_f64() {
            Some(mass) if (0.0..=1.0).contains(&mass) => Ok(()),
            _ => Err(invalid(
                loc,
                format!(
                    "must be a probability mass from 0 to 1 (0: never abstain; null for the server's --min-option-mass), got {}",
                    crate::frontends::json::compact(value)
                ),
            )),
        },
        "renderer" | "calibration" => match value {
            Value::String(text)
                if !text.trim().is_empty() && text.chars().count() <= MAX_PLUGIN_NAME_CHARS =>
            {
                Ok(())
            }
            _ => Err(invalid(
                loc,
                format!(
                    "must be a plugin name of 1 to {MAX_PLUGIN_NAME_CHARS} characters (or null for the server's default), got {}",
                    crate::frontends::json::compact(value)
                ),
            )),
        },
        // A setting added to `TenantSettings` later: its own type decides, in `merge`.
        _ => Ok(()),
    }
}

fn limits(current: &TenantLimits, patch: &Value) -> Result<TenantLimits, ApiError> {
    merge(current, patch, &loc!["limits"], check_limit)
}

fn settings(current: &TenantSettings, patch: &Value) -> Result<TenantSettings, ApiError> {
    merge(current, patch, &loc!["settings"], check_setting)
}

/// Creates a tenant from `{name, limits?, settings?}`.
pub fn create_tenant(store: &dyn Store, body: &Value) -> Result<Tenant, ApiError> {
    let map = object(body, &loc![])?;
    only_fields(map, TENANT_FIELDS, &loc![])?;
    let tenant = Tenant {
        id: keys::new_tenant_id(),
        name: name(required(map, "name", &loc![])?)?,
        limits: limits(
            &TenantLimits::default(),
            map.get("limits").unwrap_or(&Value::Null),
        )?,
        settings: settings(
            &TenantSettings::default(),
            map.get("settings").unwrap_or(&Value::Null),
        )?,
        created_at: super::now_s(),
    };
    store.create_tenant(&tenant).map_err(store_error)?;
    Ok(tenant)
}

/// Every tenant, oldest first.
pub fn list_tenants(store: &dyn Store) -> Result<Vec<Tenant>, ApiError> {
    store.tenants().map_err(store_error)
}

/// The tenant of `id`, or 404.
pub fn get_tenant(store: &dyn Store, id: &str) -> Result<Tenant, ApiError> {
    store
        .tenant(id)
        .map_err(store_error)?
        .ok_or_else(|| no_tenant(id))
}

/// Applies `{name?, limits?, settings?}` to tenant `id` (PATCH semantics, see the module
/// doc); returns the tenant as stored now.
pub fn update_tenant(store: &dyn Store, id: &str, body: &Value) -> Result<Tenant, ApiError> {
    let map = object(body, &loc![])?;
    only_fields(map, TENANT_FIELDS, &loc![])?;
    let mut tenant = get_tenant(store, id)?;
    if let Some(value) = map.get("name") {
        tenant.name = name(value)?;
    }
    if let Some(patch) = map.get("limits") {
        tenant.limits = limits(&tenant.limits, patch)?;
    }
    if let Some(patch) = map.get("settings") {
        tenant.settings = settings(&tenant.settings, patch)?;
    }
    if !store.update_tenant(&tenant).map_err(store_error)? {
        return Err(no_tenant(id));
    }
    Ok(tenant)
}

/// Deletes tenant `id` with its keys, plugins and calibration.
pub fn delete_tenant(store: &dyn Store, id: &str) -> Result<(), ApiError> {
    if store.delete_tenant(id).map_err(store_error)? {
        Ok(())
    } else {
        Err(no_tenant(id))
    }
}

/// A new key for tenant `id`; the key is in the result and nowhere else.
pub fn create_key(store: &dyn Store, tenant_id: &str) -> Result<NewKey, ApiError> {
    get_tenant(store, tenant_id)?;
    add_new_key(store, tenant_id)
}

/// [`create_key`] past its lookup of the tenant. Another request (or replica) may delete the
/// tenant in between, and the store then refuses a key that names no tenant: that is a 404
/// for the tenant, not a failure of the store.
fn add_new_key(store: &dyn Store, tenant_id: &str) -> Result<NewKey, ApiError> {
    let key = keys::new_key();
    let record = KeyRecord {
        id: keys::new_key_id(),
        tenant_id: tenant_id.to_string(),
        prefix: keys::shown_prefix(&key),
        hash: hex::encode(keys::hash(&key)),
        created_at: super::now_s(),
        revoked_at: None,
    };
    store
        .add_key(&record)
        .map_err(|error| match store.tenant(tenant_id) {
            Ok(None) => no_tenant(tenant_id),
            _ => store_error(error),
        })?;
    Ok(NewKey {
        id: record.id,
        tenant_id: record.tenant_id,
        key,
        prefix: record.prefix,
        created_at: record.created_at,
    })
}

/// Tenant `id`'s keys (revoked ones included, with `revoked_at`), never their hashes.
pub fn list_keys(store: &dyn Store, tenant_id: &str) -> Result<Vec<KeyRecord>, ApiError> {
    get_tenant(store, tenant_id)?;
    store.keys(tenant_id).map_err(store_error)
}

/// Revokes key `key_id` of tenant `tenant_id`; returns the key as revoked.
///
/// The record comes from the lookup before the revocation, with its time set: read back
/// afterwards, it could be gone already (another request deleting the tenant in between,
/// which took its keys with it), and that was a 500 (`scripts/schemathesis.sh`, two workers).
pub fn revoke_key(store: &dyn Store, tenant_id: &str, key_id: &str) -> Result<KeyRecord, ApiError> {
    get_tenant(store, tenant_id)?;
    let not_active = || {
        ApiError::NotFound {
        message: format!(
            "tenant `{tenant_id}` has no active key `{key_id}` (it is unknown or revoked already; GET /admin/v1/tenants/{tenant_id}/keys lists them)"
        ),
    }
    };
    let mut record = store
        .keys(tenant_id)
        .map_err(store_error)?
        .into_iter()
        .find(|k| k.id == key_id && k.revoked_at.is_none())
        .ok_or_else(not_active)?;
    let at = super::now_s();
    if !store
        .revoke_key(tenant_id, key_id, at)
        .map_err(store_error)?
    {
        // Revoked, or deleted with its tenant, by another request since the lookup.
        return Err(not_active());
    }
    record.revoked_at = Some(at);
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::sqlite::SqliteStore;
    use serde_json::json;

    fn store() -> (SqliteStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "decide-admin-test-{}-{}",
            std::process::id(),
            keys::new_key_id()
        ));
        (SqliteStore::open(&dir).unwrap(), dir)
    }

    fn message(error: ApiError) -> String {
        error.to_string()
    }

    #[test]
    fn create_update_and_clear_with_patch_semantics() {
        let (store, dir) = store();
        let tenant = create_tenant(
            &store,
            &json!({"name": "team-a", "limits": {"requests_per_minute": 60, "max_questions": 5}, "settings": {"weight": 3}}),
        )
        .unwrap();
        assert!(tenant.id.starts_with("tn_"));
        assert_eq!(tenant.limits.requests_per_minute, Some(60));
        assert_eq!(tenant.settings.weight, Some(3));
        let updated = update_tenant(
            &store,
            &tenant.id,
            &json!({"limits": {"requests_per_minute": null, "concurrent_requests": 2}, "settings": {"renderer": "direct-options"}}),
        )
        .unwrap();
        assert_eq!(updated.name, "team-a");
        assert_eq!(updated.limits.requests_per_minute, None);
        assert_eq!(updated.limits.max_questions, Some(5), "kept");
        assert_eq!(updated.limits.concurrent_requests, Some(2));
        assert_eq!(updated.settings.weight, Some(3), "kept");
        assert_eq!(updated.settings.renderer.as_deref(), Some("direct-options"));
        assert_eq!(get_tenant(&store, &tenant.id).unwrap(), updated);
        let cleared =
            update_tenant(&store, &tenant.id, &json!({"limits": null, "name": "b"})).unwrap();
        assert_eq!(cleared.limits, TenantLimits::default());
        assert_eq!(cleared.name, "b");
        delete_tenant(&store, &tenant.id).unwrap();
        assert!(matches!(
            get_tenant(&store, &tenant.id),
            Err(ApiError::NotFound { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bad_bodies_name_the_field_and_the_rule() {
        let (store, dir) = store();
        let cases = [
            (json!({"name": ""}), "name: must be 1 to 128"),
            (json!({"name": "x".repeat(129)}), "name: must be 1 to 128"),
            (json!({"limits": {}}), "name: field required"),
            (json!({"name": "a", "colour": 1}), "colour: unknown field"),
            (
                json!({"name": "a", "limits": {"requests_per_minute": -1}}),
                "limits.requests_per_minute: must be a non-negative integer",
            ),
            (
                json!({"name": "a", "limits": {"max_questions": 1.5}}),
                "limits.max_questions: must be a non-negative integer",
            ),
            (
                json!({"name": "a", "limits": {"speed": 1}}),
                "limits.speed: unknown field `speed`, expected one of",
            ),
            (
                json!({"name": "a", "settings": {"weight": 0}}),
                "settings.weight: must be an integer from 1 to 1000",
            ),
            (
                json!({"name": "a", "settings": {"weight": 1001}}),
                "settings.weight: must be an integer from 1 to 1000",
            ),
            (
                json!({"name": "a", "limits": 3}),
                "limits: expected an object",
            ),
        ];
        for (body, expected) in cases {
            let error = create_tenant(&store, &body).unwrap_err();
            assert!(
                matches!(error, ApiError::Invalid { .. }),
                "{body}: {error:?}"
            );
            let text = message(error);
            assert!(text.starts_with(expected), "{body}: {text}");
        }
        assert!(store.tenants().unwrap().is_empty(), "nothing was written");
        create_tenant(&store, &json!({"name": "dup"})).unwrap();
        let conflict = create_tenant(&store, &json!({"name": "dup"})).unwrap_err();
        assert!(
            matches!(conflict, ApiError::Conflict { .. }),
            "{conflict:?}"
        );
        assert!(message(conflict).contains("`dup`"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn keys_are_shown_once_and_stored_as_hashes() {
        let (store, dir) = store();
        let tenant = create_tenant(&store, &json!({"name": "k"})).unwrap();
        let key = create_key(&store, &tenant.id).unwrap();
        assert!(key.key.starts_with("dk_") && key.key.starts_with(&key.prefix));
        let listed = list_keys(&store, &tenant.id).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].hash, hex::encode(keys::hash(&key.key)));
        assert!(!serde_json::to_string(&listed)
            .unwrap()
            .contains(&key.key[3..]));
        let revoked = revoke_key(&store, &tenant.id, &key.id).unwrap();
        assert!(revoked.revoked_at.is_some());
        assert!(matches!(
            revoke_key(&store, &tenant.id, &key.id),
            Err(ApiError::NotFound { .. })
        ));
        assert!(matches!(
            create_key(&store, "tn_nobody"),
            Err(ApiError::NotFound { .. })
        ));
        // A tenant deleted after create_key looked it up: the store's refusal is a 404.
        assert!(matches!(
            add_new_key(&store, "tn_nobody"),
            Err(ApiError::NotFound { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
