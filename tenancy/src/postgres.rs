//! The shared [`Store`] for several replicas: Postgres (`--store postgres://...`), records and
//! plugin blobs in one database.
//!
//! Blobs live in Postgres too (`blobs`: SHA-256 -> `bytea`), not in an object store: plugins
//! and calibration files are small (a component is capped at a few MiB), one database is one
//! thing to run, back up and restore, and a blob is committed before the version record that
//! names it, so every replica that sees the record can read its bytes.
//!
//! Change notification: triggers on every table `pg_notify('decide_store_changed')` at
//! commit, whoever wrote (a replica, the CLI, an operator's `psql`). Each store holds one
//! connection that `LISTEN`s and moves the [generation](Store::generation) on every
//! notification, and on every reconnect (a notification may have been missed while it was
//! down); [`Store::wait_for_change`] wakes on it at once, so a replica learns of a new plugin
//! version within milliseconds of the commit.
//!
//! Why tokio-postgres on a runtime of its own: the [`Store`] trait is synchronous (SQLite is,
//! and the admin API and CLI call it from blocking threads), but the directory also calls it
//! from request handlers on the server's runtime. The sync `postgres` crate would `block_on`
//! there and panic; instead this store owns a two-thread tokio runtime where the pool
//! (deadpool-postgres) and the listener run, and a trait call hands its query to that runtime
//! and waits on a plain channel, which is allowed on any thread. The generation itself is an
//! atomic read, so the directory's checks never touch the database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, NoTls, Row};

use crate::shared_rates::{remaining_cells, wait_for, SharedRates, Take, Taking};
use crate::store::{
    json, KeyRecord, PluginVersion, Store, StoreError, Tenant, KEY_COLUMNS, TENANT_COLUMNS,
    VERSION_COLUMNS,
};

/// The channel every change is notified on.
const CHANNEL: &str = "decide_store_changed";
/// Longest wait for a pooled connection or a new one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before the listener reconnects after losing its connection.
const RELISTEN_DELAY: Duration = Duration::from_millis(500);
/// Key of the advisory lock held while creating the schema (replicas start together).
const SCHEMA_LOCK: i64 = 0x6465_6369_6465;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    limits TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    prefix TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE IF NOT EXISTS plugin_versions (
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    kind TEXT NOT NULL,
    plugin_version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    active BOOLEAN NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);
CREATE TABLE IF NOT EXISTS calibrations (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    bytes BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_buckets (
    bucket TEXT PRIMARY KEY,
    tat DOUBLE PRECISION NOT NULL
);
CREATE OR REPLACE FUNCTION decide_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('decide_store_changed', TG_TABLE_NAME);
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION decide_notify_change();
CREATE OR REPLACE TRIGGER keys_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON keys
    FOR EACH STATEMENT EXECUTE FUNCTION decide_notify_change();
CREATE OR REPLACE TRIGGER plugin_versions_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plugin_versions
    FOR EACH STATEMENT EXECUTE FUNCTION decide_notify_change();
CREATE OR REPLACE TRIGGER calibrations_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON calibrations
    FOR EACH STATEMENT EXECUTE FUNCTION decide_notify_change();
";

/// The generation and the condition its waiters sleep on.
#[derive(Default)]
struct Generation {
    value: AtomicU64,
    moved: Condvar,
    lock: Mutex<()>,
}

impl Generation {
    fn bump(&self) {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.value.fetch_add(1, Ordering::SeqCst);
        self.moved.notify_all();
    }
}

/// Postgres, through a pool on the store's own runtime.
pub struct PostgresStore {
    /// `Some` until drop, which shuts it down without blocking (drop may run on any thread).
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    generation: Arc<Generation>,
    /// Where it connects, without the password, for messages.
    shown: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("at", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn db(error: impl std::fmt::Display) -> StoreError {
    StoreError::Database(error.to_string())
}

/// Host, port and database of a connection config (no user or password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres {host}:{port}/{}",
        config.get_dbname().unwrap_or("(default database)")
    )
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`), creates the schema
    /// if needed and starts listening for changes.
    pub fn open(url: &str) -> Result<PostgresStore, StoreError> {
        let config: tokio_postgres::Config = url.parse().map_err(|e| {
            StoreError::Database(format!(
                "`--store` is not a Postgres URL (postgres://user:password@host:port/database): {e}"
            ))
        })?;
        PostgresStore::open_config(config)
    }

    /// [`open`](Self::open) with a parsed config.
    pub fn open_config(mut config: tokio_postgres::Config) -> Result<PostgresStore, StoreError> {
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("decide");
        let shown = describe(&config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("decide-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Database(format!("starting the store's runtime: {e}")))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(db)?;
        let store = PostgresStore {
            runtime: Some(runtime),
            pool,
            generation: Arc::default(),
            shown,
        };
        store
            .run(|pool| async move {
                let mut client = pool.get().await.map_err(db)?;
                let tx = client.transaction().await.map_err(db)?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
                    .await
                    .map_err(db)?;
                tx.batch_execute(SCHEMA).await.map_err(db)?;
                tx.commit().await.map_err(db)
            })
            .map_err(|e| StoreError::Database(format!("{}: {e}", store.shown)))?;
        store.listen(config)?;
        Ok(store)
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// Runs `query` on the store's runtime and waits for its result on this thread.
    fn run<T, F>(&self, query: impl FnOnce(Pool) -> F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let future = query(self.pool.clone());
        self.runtime().spawn(async move {
            let _ = sender.send(future.await);
        });
        receiver
            .recv()
            .map_err(|_| StoreError::Database("the store's runtime stopped".into()))?
    }

    /// Starts the task that `LISTEN`s on [`CHANNEL`] and moves the generation; waits until
    /// it listens the first time, so no change after `open` returns is missed.
    fn listen(&self, config: tokio_postgres::Config) -> Result<(), StoreError> {
        let generation = self.generation.clone();
        let shown = self.shown.clone();
        let (ready, listening) = std::sync::mpsc::sync_channel::<Result<(), StoreError>>(1);
        self.runtime().spawn(async move {
            let mut ready = Some(ready);
            loop {
                match listen_once(&config, &generation, &mut ready).await {
                    Ok(()) => tracing::warn!(store = %shown, "the store's change listener lost its connection; reconnecting"),
                    Err(error) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Err(error));
                            return;
                        }
                        tracing::warn!(store = %shown, %error, "the store's change listener cannot connect; retrying");
                    }
                }
                tokio::time::sleep(RELISTEN_DELAY).await;
            }
        });
        listening
            .recv()
            .map_err(|_| StoreError::Database("the store's listener stopped".into()))?
    }
}

/// One connection's life of the listener: connect, `LISTEN`, bump the generation (changes
/// may have been missed before), then bump on every notification until the connection ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    generation: &Generation,
    ready: &mut Option<std::sync::mpsc::SyncSender<Result<(), StoreError>>>,
) -> Result<(), StoreError> {
    use futures_util::StreamExt as _;
    let (client, mut connection) = config.connect(NoTls).await.map_err(db)?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!("LISTEN {CHANNEL}");
    {
        let listen = client.batch_execute(&statement);
        // The connection must be polled for the LISTEN to complete.
        tokio::pin!(listen);
        loop {
            tokio::select! {
                done = &mut listen => { done.map_err(db)?; break; }
                message = messages.next() => match message {
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(db(error)),
                    None => return Err(StoreError::Database("the listener's connection closed".into())),
                }
            }
        }
    }
    generation.bump();
    if let Some(ready) = ready.take() {
        let _ = ready.send(Ok(()));
    }
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(_)) => generation.bump(),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "the store's change listener failed");
                break;
            }
        }
    }
    drop(client);
    generation.bump();
    Ok(())
}

/// Deletes the blobs among `candidates` that no version of any tenant names any more, in the
/// caller's transaction (after it deleted the versions that named them).
async fn remove_unreferenced(
    tx: &tokio_postgres::Transaction<'_>,
    candidates: &[String],
) -> Result<(), StoreError> {
    if candidates.is_empty() {
        return Ok(());
    }
    tx.execute(
        "DELETE FROM blobs b WHERE b.sha256 = ANY($1)
           AND NOT EXISTS (SELECT 1 FROM plugin_versions v WHERE v.sha256 = b.sha256)",
        &[&candidates],
    )
    .await
    .map_err(db)?;
    Ok(())
}

fn tenant_from_row(row: &Row) -> Result<Tenant, StoreError> {
    let id: String = row.get(0);
    let limits: String = row.get(2);
    let settings: String = row.get(3);
    Ok(Tenant {
        limits: serde_json::from_str(&limits)
            .map_err(|e| StoreError::Database(format!("tenant {id}: bad limits: {e}")))?,
        settings: serde_json::from_str(&settings)
            .map_err(|e| StoreError::Database(format!("tenant {id}: bad settings: {e}")))?,
        name: row.get(1),
        created_at: row.get::<_, i64>(4) as u64,
        id,
    })
}

fn key_from_row(row: &Row) -> KeyRecord {
    KeyRecord {
        id: row.get(0),
        tenant_id: row.get(1),
        prefix: row.get(2),
        hash: row.get(3),
        created_at: row.get::<_, i64>(4) as u64,
        revoked_at: row.get::<_, Option<i64>>(5).map(|t| t as u64),
    }
}

fn version_from_row(row: &Row) -> PluginVersion {
    PluginVersion {
        tenant_id: row.get(0),
        name: row.get(1),
        version: row.get::<_, i32>(2) as u32,
        kind: row.get(3),
        plugin_version: row.get(4),
        sha256: row.get(5),
        size: row.get::<_, i64>(6) as u64,
        created_at: row.get::<_, i64>(7) as u64,
        active: row.get(8),
    }
}

/// A duplicate tenant name is a conflict; anything else a database error.
fn tenant_write_error(error: tokio_postgres::Error, name: &str) -> StoreError {
    if error.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        StoreError::Conflict(format!("a tenant named `{name}` exists already"))
    } else {
        db(error)
    }
}

/// One GCRA take on the database's clock: the new theoretical arrival time is the later of
/// the stored one and now, plus the cells' emission intervals; it is written only when it
/// stays within a minute of now. Returns how far ahead of now it is (the backlog, seconds).
const TAKE: &str = "
INSERT INTO rate_buckets AS b (bucket, tat) VALUES ($1, extract(epoch FROM now())::float8 + $2)
ON CONFLICT (bucket) DO UPDATE SET tat = greatest(b.tat, extract(epoch FROM now())::float8) + $2
    WHERE greatest(b.tat, extract(epoch FROM now())::float8) + $2 - extract(epoch FROM now())::float8 <= 60.0
RETURNING tat - extract(epoch FROM now())::float8";

/// The backlog of a bucket that refused a take.
const BACKLOG: &str =
    "SELECT tat - extract(epoch FROM now())::float8 FROM rate_buckets WHERE bucket = $1";

impl SharedRates for PostgresStore {
    fn take(&self, bucket: String, cells: u32, per_minute: u32) -> Taking {
        let pool = self.pool.clone();
        let cost = f64::from(cells) * 60.0 / f64::from(per_minute.max(1));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.runtime().spawn(async move {
            let taken = async {
                let client = pool.get().await.map_err(db)?;
                if let Some(row) = client
                    .query_opt(TAKE, &[&bucket, &cost])
                    .await
                    .map_err(db)?
                {
                    let backlog: f64 = row.get(0);
                    return Ok(Take::Taken {
                        remaining: remaining_cells(backlog, per_minute),
                    });
                }
                let backlog: f64 = client
                    .query_opt(BACKLOG, &[&bucket])
                    .await
                    .map_err(db)?
                    .map_or(0.0, |row| row.get(0));
                Ok(Take::Refused {
                    wait: wait_for(backlog, cells, per_minute),
                })
            };
            let _ = sender.send(taken.await);
        });
        Box::pin(async move {
            receiver
                .await
                .map_err(|_| StoreError::Database("the store's runtime stopped".into()))?
        })
    }
}

impl Store for PostgresStore {
    fn generation(&self) -> Result<u64, StoreError> {
        Ok(self.generation.value.load(Ordering::SeqCst))
    }

    fn shared_rates(self: Arc<Self>) -> Option<Arc<dyn SharedRates>> {
        Some(self)
    }

    fn wait_for_change(&self, seen: u64, timeout: Duration) -> Result<u64, StoreError> {
        let held = self
            .generation
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let _held = self
            .generation
            .moved
            .wait_timeout_while(held, timeout, |_| {
                self.generation.value.load(Ordering::SeqCst) == seen
            })
            .unwrap_or_else(|p| p.into_inner());
        self.generation()
    }

    fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError> {
        let tenant = tenant.clone();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            client
                .execute(
                    &format!("INSERT INTO tenants ({TENANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"),
                    &[
                        &tenant.id,
                        &tenant.name,
                        &json(&tenant.limits),
                        &json(&tenant.settings),
                        &(tenant.created_at as i64),
                    ],
                )
                .await
                .map_err(|e| tenant_write_error(e, &tenant.name))?;
            client
                .execute(
                    "INSERT INTO meta (key, value) VALUES ('had_tenants', '1') ON CONFLICT (key) DO NOTHING",
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn had_tenants(&self) -> Result<bool, StoreError> {
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let row = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM meta WHERE key = 'had_tenants') OR EXISTS (SELECT 1 FROM tenants)",
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(row.get(0))
        })
    }

    fn tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY created_at, id"),
                    &[],
                )
                .await
                .map_err(db)?;
            rows.iter().map(tenant_from_row).collect()
        })
    }

    fn tenant(&self, id: &str) -> Result<Option<Tenant>, StoreError> {
        let id = id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let row = client
                .query_opt(
                    &format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1"),
                    &[&id],
                )
                .await
                .map_err(db)?;
            row.as_ref().map(tenant_from_row).transpose()
        })
    }

    fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError> {
        let tenant = tenant.clone();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let changed = client
                .execute(
                    "UPDATE tenants SET name = $2, limits = $3, settings = $4 WHERE id = $1",
                    &[
                        &tenant.id,
                        &tenant.name,
                        &json(&tenant.limits),
                        &json(&tenant.settings),
                    ],
                )
                .await
                .map_err(|e| tenant_write_error(e, &tenant.name))?;
            Ok(changed > 0)
        })
    }

    fn delete_tenant(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.run(|pool| async move {
            let mut client = pool.get().await.map_err(db)?;
            let tx = client.transaction().await.map_err(db)?;
            let blobs: Vec<String> = tx
                .query(
                    "SELECT DISTINCT sha256 FROM plugin_versions WHERE tenant_id = $1",
                    &[&id],
                )
                .await
                .map_err(db)?
                .iter()
                .map(|row| row.get(0))
                .collect();
            let deleted = tx
                .execute("DELETE FROM tenants WHERE id = $1", &[&id])
                .await
                .map_err(db)?;
            remove_unreferenced(&tx, &blobs).await?;
            tx.commit().await.map_err(db)?;
            Ok(deleted > 0)
        })
    }

    fn add_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        let key = key.clone();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            client
                .execute(
                    &format!("INSERT INTO keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"),
                    &[
                        &key.id,
                        &key.tenant_id,
                        &key.prefix,
                        &key.hash,
                        &(key.created_at as i64),
                        &key.revoked_at.map(|t| t as i64),
                    ],
                )
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn keys(&self, tenant_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let tenant_id = tenant_id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {KEY_COLUMNS} FROM keys WHERE tenant_id = $1 ORDER BY created_at, id"
                    ),
                    &[&tenant_id],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(key_from_row).collect())
        })
    }

    fn active_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!("SELECT {KEY_COLUMNS} FROM keys WHERE revoked_at IS NULL"),
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(key_from_row).collect())
        })
    }

    fn revoke_key(&self, tenant_id: &str, key_id: &str, at: u64) -> Result<bool, StoreError> {
        let (tenant_id, key_id) = (tenant_id.to_string(), key_id.to_string());
        self.run(move |pool| async move {
            let client = pool.get().await.map_err(db)?;
            let changed = client
                .execute(
                    "UPDATE keys SET revoked_at = $3 WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL",
                    &[&tenant_id, &key_id, &(at as i64)],
                )
                .await
                .map_err(db)?;
            Ok(changed > 0)
        })
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let sha256 = decide_plugins::runtime::sha256_hex(bytes);
        let (digest, bytes) = (sha256.clone(), bytes.to_vec());
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            client
                .execute(
                    "INSERT INTO blobs (sha256, bytes) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING",
                    &[&digest, &bytes],
                )
                .await
                .map_err(db)?;
            Ok(())
        })?;
        Ok(sha256)
    }

    fn blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let sha256 = sha256.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let row = client
                .query_opt("SELECT bytes FROM blobs WHERE sha256 = $1", &[&sha256])
                .await
                .map_err(db)?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn add_plugin_version(&self, version: &PluginVersion) -> Result<u32, StoreError> {
        let version = version.clone();
        self.run(|pool| async move {
            let mut client = pool.get().await.map_err(db)?;
            let tx = client.transaction().await.map_err(db)?;
            // Replicas may upload the same name at once: one waits for the other's number.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1 || '/' || $2))",
                &[&version.tenant_id, &version.name],
            )
            .await
            .map_err(db)?;
            let last: Option<i32> = tx
                .query_one(
                    "SELECT MAX(version) FROM plugin_versions WHERE tenant_id = $1 AND name = $2",
                    &[&version.tenant_id, &version.name],
                )
                .await
                .map_err(db)?
                .get(0);
            let number = last.unwrap_or(0) + 1;
            // The blob row is locked until commit, so a purge's delete of it waits for this
            // version and then finds it referenced.
            if tx
                .query_opt(
                    "SELECT 1 FROM blobs WHERE sha256 = $1 FOR SHARE",
                    &[&version.sha256],
                )
                .await
                .map_err(db)?
                .is_none()
            {
                return Err(StoreError::MissingBlob(version.sha256.clone()));
            }
            tx.execute(
                "UPDATE plugin_versions SET active = FALSE WHERE tenant_id = $1 AND name = $2",
                &[&version.tenant_id, &version.name],
            )
            .await
            .map_err(db)?;
            tx.execute(
                &format!(
                    "INSERT INTO plugin_versions ({VERSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, TRUE)"
                ),
                &[
                    &version.tenant_id,
                    &version.name,
                    &number,
                    &version.kind,
                    &version.plugin_version,
                    &version.sha256,
                    &(version.size as i64),
                    &(version.created_at as i64),
                ],
            )
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(number as u32)
        })
    }

    fn plugin_versions(
        &self,
        tenant_id: &str,
        name: &str,
    ) -> Result<Vec<PluginVersion>, StoreError> {
        let (tenant_id, name) = (tenant_id.to_string(), name.to_string());
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE tenant_id = $1 AND name = $2 ORDER BY version"
                    ),
                    &[&tenant_id, &name],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(version_from_row).collect())
        })
    }

    fn activate_plugin_version(
        &self,
        tenant_id: &str,
        name: &str,
        version: u32,
    ) -> Result<bool, StoreError> {
        let (tenant_id, name, version) = (tenant_id.to_string(), name.to_string(), version as i32);
        self.run(move |pool| async move {
            let client = pool.get().await.map_err(db)?;
            // One statement: when the version exists, it alone is active; otherwise nothing changes.
            let changed = client
                .execute(
                    "UPDATE plugin_versions SET active = (version = $3)
                     WHERE tenant_id = $1 AND name = $2
                       AND EXISTS (SELECT 1 FROM plugin_versions
                                   WHERE tenant_id = $1 AND name = $2 AND version = $3)",
                    &[&tenant_id, &name, &version],
                )
                .await
                .map_err(db)?;
            Ok(changed > 0)
        })
    }

    fn remove_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError> {
        let (tenant_id, name) = (tenant_id.to_string(), name.to_string());
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let changed = client
                .execute(
                    "UPDATE plugin_versions SET active = FALSE WHERE tenant_id = $1 AND name = $2 AND active",
                    &[&tenant_id, &name],
                )
                .await
                .map_err(db)?;
            Ok(changed > 0)
        })
    }

    fn active_plugins(&self) -> Result<Vec<PluginVersion>, StoreError> {
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE active ORDER BY tenant_id, name"
                    ),
                    &[],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(version_from_row).collect())
        })
    }

    fn tenant_plugin_versions(&self, tenant_id: &str) -> Result<Vec<PluginVersion>, StoreError> {
        let tenant_id = tenant_id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE tenant_id = $1 ORDER BY name, version"
                    ),
                    &[&tenant_id],
                )
                .await
                .map_err(db)?;
            Ok(rows.iter().map(version_from_row).collect())
        })
    }

    fn purge_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError> {
        let (tenant_id, name) = (tenant_id.to_string(), name.to_string());
        self.run(|pool| async move {
            let mut client = pool.get().await.map_err(db)?;
            let tx = client.transaction().await.map_err(db)?;
            let blobs: Vec<String> = tx
                .query(
                    "DELETE FROM plugin_versions WHERE tenant_id = $1 AND name = $2 RETURNING sha256",
                    &[&tenant_id, &name],
                )
                .await
                .map_err(db)?
                .iter()
                .map(|row| row.get(0))
                .collect();
            remove_unreferenced(&tx, &blobs).await?;
            tx.commit().await.map_err(db)?;
            Ok(!blobs.is_empty())
        })
    }

    fn save_calibration(&self, tenant_id: &str, json: &str) -> Result<(), StoreError> {
        let (tenant_id, json) = (tenant_id.to_string(), json.to_string());
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            client
                .execute(
                    "INSERT INTO calibrations (tenant_id, json) VALUES ($1, $2)
                     ON CONFLICT (tenant_id) DO UPDATE SET json = excluded.json",
                    &[&tenant_id, &json],
                )
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn calibration(&self, tenant_id: &str) -> Result<Option<String>, StoreError> {
        let tenant_id = tenant_id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let row = client
                .query_opt(
                    "SELECT json FROM calibrations WHERE tenant_id = $1",
                    &[&tenant_id],
                )
                .await
                .map_err(db)?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn delete_calibration(&self, tenant_id: &str) -> Result<bool, StoreError> {
        let tenant_id = tenant_id.to_string();
        self.run(|pool| async move {
            let client = pool.get().await.map_err(db)?;
            let deleted = client
                .execute(
                    "DELETE FROM calibrations WHERE tenant_id = $1",
                    &[&tenant_id],
                )
                .await
                .map_err(db)?;
            Ok(deleted > 0)
        })
    }
}
