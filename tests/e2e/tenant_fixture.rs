//! Tenants for tests, written straight into a server's store (the same `SqliteStore` the
//! server opens), so tests of limits, plugins and caches need not go through the admin API.
//! The admin API's own tests create tenants over HTTP.

use std::path::Path;

use decide_tenancy::keys;
use decide_tenancy::sqlite::SqliteStore;
use decide_tenancy::{KeyRecord, Store, Tenant, TenantLimits, TenantSettings};

/// A tenant created in the store of `data_dir`, with one key.
pub struct Seeded {
    pub id: String,
    pub key: String,
}

/// Creates tenant `name` with `limits` and one API key in the store of `data_dir`.
pub fn seed_tenant(data_dir: &Path, name: &str, limits: TenantLimits) -> Seeded {
    seed_tenant_with(data_dir, name, limits, TenantSettings::default())
}

/// [`seed_tenant`] with settings.
pub fn seed_tenant_with(
    data_dir: &Path,
    name: &str,
    limits: TenantLimits,
    settings: TenantSettings,
) -> Seeded {
    let store = SqliteStore::open(data_dir).expect("open the test store");
    let id = keys::new_tenant_id();
    store
        .create_tenant(&Tenant {
            id: id.clone(),
            name: name.to_string(),
            limits,
            settings,
            created_at: decide_tenancy::now_s(),
        })
        .expect("create the tenant");
    let key = add_key(&store, &id);
    Seeded { id, key }
}

/// Adds a key to tenant `id`; returns the key.
pub fn add_key(store: &SqliteStore, id: &str) -> String {
    let key = keys::new_key();
    store
        .add_key(&KeyRecord {
            id: keys::new_key_id(),
            tenant_id: id.to_string(),
            prefix: keys::shown_prefix(&key),
            hash: hex::encode(keys::hash(&key)),
            created_at: decide_tenancy::now_s(),
            revoked_at: None,
        })
        .expect("add the key");
    key
}
