//! The in-memory view of the store that every request consults: which tenant a key belongs
//! to, and each tenant's record.
//!
//! A request never waits on the database for authentication: it hashes the presented key
//! and looks the hash up in a snapshot. The snapshot is rebuilt when the store's
//! [generation](Store::generation) moves, checked at most every [`RECHECK`], so a key
//! created or revoked by the `decide tenants` CLI (another process) takes effect within
//! that time, and one changed through the admin API at once ([`Directory::reload`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::{header, HeaderMap};

use crate::keys;
use crate::store::{Store, StoreError, Tenant};
use crate::Refused;

/// How often a request may check whether the store changed.
pub const RECHECK: Duration = Duration::from_millis(500);

/// Who is asking.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The server's one implicit tenant: no tenants are configured, or the request presented
    /// the operator's `--api-key`.
    Default,
    /// A configured tenant, by one of its keys.
    Tenant { tenant: Arc<Tenant>, key_id: String },
}

impl Caller {
    /// The tenant's id, `None` for the default tenant.
    pub fn tenant_id(&self) -> Option<&str> {
        match self {
            Caller::Default => None,
            Caller::Tenant { tenant, .. } => Some(&tenant.id),
        }
    }

    /// The tenant record, `None` for the default tenant.
    pub fn tenant(&self) -> Option<&Arc<Tenant>> {
        match self {
            Caller::Default => None,
            Caller::Tenant { tenant, .. } => Some(tenant),
        }
    }

    /// The tenant, or a 403 for the default tenant: `what` (e.g. "uploading plugins") needs
    /// a tenant's key; `instead` says what the operator does for the server itself.
    pub fn require_tenant(&self, what: &str, instead: &str) -> Result<Arc<Tenant>, Refused> {
        self.tenant().cloned().ok_or_else(|| Refused::Forbidden {
            message: format!(
                "{what} needs a tenant's API key: create a tenant and a key with the admin API (/admin/v1/tenants); {instead}"
            ),
        })
    }

    /// The name used for this caller in metrics and logs of its own (`default` or the
    /// tenant's id: ids, not names, so a metrics reader learns no team names).
    pub fn label(&self) -> &str {
        self.tenant_id().unwrap_or("default")
    }
}

/// A consistent picture of tenants and keys.
#[derive(Default)]
struct Snapshot {
    /// Whether the store ever had a tenant ([`Store::had_tenants`]).
    had_tenants: bool,
    tenants: HashMap<String, Arc<Tenant>>,
    /// Key hash -> (key id, tenant id), for keys that are not revoked.
    keys: HashMap<[u8; 32], (String, String)>,
}

/// Tenants and keys as requests see them.
pub struct Directory {
    store: Arc<dyn Store>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// The generation the snapshot was built from, and when the store was last asked.
    loaded: Mutex<(u64, Instant)>,
    /// Hash of the operator's `--api-key`, which authenticates as the default tenant.
    operator_key: Option<[u8; 32]>,
    /// `--allow-anonymous`: serve without a key once the last tenant is deleted.
    allow_anonymous: bool,
    /// Whether the refusal of keyless requests after the last tenant went was logged.
    closed_logged: std::sync::atomic::AtomicBool,
    /// Called with the id of every tenant that a reload finds gone (deleted through the
    /// admin API or by another process), so per-tenant state elsewhere is dropped.
    removed_listeners: RwLock<Vec<RemovedListener>>,
}

/// See [`Directory::on_tenant_removed`].
pub type RemovedListener = Box<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("tenants", &self.current().tenants.len())
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// Loads the store's tenants and keys.
    pub fn open(
        store: Arc<dyn Store>,
        operator_key: Option<&str>,
    ) -> Result<Directory, StoreError> {
        let directory = Directory {
            store,
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            loaded: Mutex::new((u64::MAX, Instant::now())),
            operator_key: operator_key.map(keys::hash),
            allow_anonymous: false,
            closed_logged: std::sync::atomic::AtomicBool::new(false),
            removed_listeners: RwLock::new(Vec::new()),
        };
        directory.reload()?;
        Ok(directory)
    }

    /// Lets requests without a key through on a server whose tenants were all deleted
    /// (`--allow-anonymous`); otherwise such a server refuses them.
    pub fn allow_anonymous(mut self, allow: bool) -> Directory {
        self.allow_anonymous = allow;
        self
    }

    /// The store behind the directory.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Rebuilds the snapshot from the store now.
    pub fn reload(&self) -> Result<(), StoreError> {
        let generation = self.store.generation()?;
        let had_tenants = self.store.had_tenants()?;
        let tenants: HashMap<String, Arc<Tenant>> = self
            .store
            .tenants()?
            .into_iter()
            .map(|t| (t.id.clone(), Arc::new(t)))
            .collect();
        if !tenants.is_empty() {
            // Logged again should the last tenant go again.
            self.closed_logged
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
        let mut keys = HashMap::new();
        for key in self.store.active_keys()? {
            let Ok(bytes) = hex::decode(&key.hash) else {
                tracing::warn!(key = %key.id, "a stored key hash is not hex; the key is ignored");
                continue;
            };
            let Ok(hash) = <[u8; 32]>::try_from(bytes.as_slice()) else {
                continue;
            };
            if tenants.contains_key(&key.tenant_id) {
                keys.insert(hash, (key.id, key.tenant_id));
            }
        }
        let before = std::mem::replace(
            &mut *self.snapshot.write().unwrap_or_else(|p| p.into_inner()),
            Arc::new(Snapshot {
                had_tenants,
                tenants,
                keys,
            }),
        );
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = (generation, Instant::now());
        let now = self.current();
        let listeners = self
            .removed_listeners
            .read()
            .unwrap_or_else(|p| p.into_inner());
        for id in before
            .tenants
            .keys()
            .filter(|id| !now.tenants.contains_key(*id))
        {
            for listener in listeners.iter() {
                listener(id);
            }
        }
        Ok(())
    }

    /// Registers `listener` to be called with each tenant id a reload finds removed.
    pub fn on_tenant_removed(&self, listener: RemovedListener) {
        self.removed_listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(listener);
    }

    /// Reloads when the store moved and [`RECHECK`] has passed since the last look.
    fn refresh(&self) {
        {
            let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            if loaded.1.elapsed() < RECHECK {
                return;
            }
            loaded.1 = Instant::now();
            match self.store.generation() {
                Ok(generation) if generation == loaded.0 => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot read the tenant store; serving the tenants loaded before");
                    return;
                }
            }
        }
        if let Err(error) = self.reload() {
            tracing::warn!(%error, "cannot reload the tenant store; serving the tenants loaded before");
        }
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether any tenant is configured (otherwise the server runs as one default tenant).
    pub fn has_tenants(&self) -> bool {
        self.refresh();
        !self.current().tenants.is_empty()
    }

    /// The tenant of that id, as last loaded.
    pub fn tenant(&self, id: &str) -> Option<Arc<Tenant>> {
        self.refresh();
        self.current().tenants.get(id).cloned()
    }

    /// Every tenant, as last loaded.
    pub fn tenants(&self) -> Vec<Arc<Tenant>> {
        self.refresh();
        self.current().tenants.values().cloned().collect()
    }

    /// Who a request is, from its `Authorization: Bearer KEY` header.
    ///
    /// With no tenants configured the server behaves as before tenancy: `--api-key`, when
    /// set, is required, and every request is the default tenant. Once a tenant exists,
    /// every request needs a key: a tenant's, or the operator's `--api-key`. A server that
    /// had tenants and has none left fails closed: without `--api-key` it refuses every
    /// request (unless `--allow-anonymous`), since serving anyone would be what deleting the
    /// last tenant did otherwise.
    ///
    /// A refusal never shows any part of the presented token: a secret sent to the wrong
    /// server (an admin key, another service's key) must not come back in a response.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refused> {
        self.refresh();
        let snapshot = self.current();
        let presented = presented_key(headers);
        let operator_key = |hash: &[u8; 32]| {
            self.operator_key
                .as_ref()
                .is_some_and(|expected| keys::hashes_equal(expected, hash))
        };
        if snapshot.tenants.is_empty() {
            return match (&self.operator_key, presented) {
                (None, _) if snapshot.had_tenants && !self.allow_anonymous => {
                    if !self
                        .closed_logged
                        .swap(true, std::sync::atomic::Ordering::Relaxed)
                    {
                        tracing::warn!("every tenant of this server was deleted and it has no --api-key: requests are refused (401) instead of served without a key; set --api-key, create a tenant, or start it with --allow-anonymous");
                    }
                    Err(Refused::Unauthorized {
                        message: "this server had tenants and has none left, so it serves no request without a key: the operator sets --api-key / DECIDE_API_KEY (or creates a tenant, or starts it with --allow-anonymous / DECIDE_ALLOW_ANONYMOUS to serve without keys)".into(),
                    })
                }
                (None, _) => Ok(Caller::Default),
                (Some(_), Some(key)) if operator_key(&keys::hash(key)) => Ok(Caller::Default),
                (Some(_), Some(_)) => Err(Refused::Unauthorized {
                    message: "the API key is not valid for this server".into(),
                }),
                (Some(_), None) => Err(Refused::Unauthorized {
                    message: "missing `Authorization: Bearer <key>` header (this server is started with --api-key)".into(),
                }),
            };
        }
        let Some(key) = presented else {
            return Err(Refused::Unauthorized {
                message: "missing `Authorization: Bearer <key>` header: this server serves several tenants, and each request needs its tenant's API key".into(),
            });
        };
        let hash = keys::hash(key);
        if operator_key(&hash) {
            return Ok(Caller::Default);
        }
        let found = snapshot
            .keys
            .get_key_value(&hash)
            .and_then(|(stored, (key_id, tenant_id))| {
                // The map found the entry by hash; the comparison that decides is constant-time.
                keys::hashes_equal(stored, &hash)
                    .then(|| snapshot.tenants.get(tenant_id).map(|t| (key_id, t)))
                    .flatten()
            });
        match found {
            Some((key_id, tenant)) => Ok(Caller::Tenant {
                tenant: tenant.clone(),
                key_id: key_id.clone(),
            }),
            None => Err(Refused::Unauthorized {
                message: "the API key is not valid: it is unknown or was revoked".into(),
            }),
        }
    }
}

/// The bearer token of the request, if any.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|key| !key.is_empty())
}
