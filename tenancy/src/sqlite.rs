//! The embedded [`Store`]: SQLite (`<data-dir>/tenants.db`, WAL mode) for records and
//! content-addressed files (`<data-dir>/blobs/<sha256>`) for blobs. Needs nothing installed:
//! SQLite is compiled into the binary.
//!
//! Crash safety: a blob is written to a temp file, fsynced, renamed into place and the
//! directory fsynced before its digest is returned, and records naming it are written after
//! that in one transaction. A crash at any point leaves either the old records (the old
//! version serving) or the new ones with their blob complete; a leftover temp file is
//! ignored and removed at the next open.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use crate::store::{
    json, KeyRecord, PluginVersion, Store, StoreError, Tenant, KEY_COLUMNS, TENANT_COLUMNS,
    VERSION_COLUMNS,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    limits TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    prefix TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS plugin_versions (
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    kind TEXT NOT NULL,
    plugin_version TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    active INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);
CREATE TABLE IF NOT EXISTS calibrations (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// The `meta` row that says a tenant was ever created here ([`Store::had_tenants`]).
const HAD_TENANTS: &str = "had_tenants";

/// SQLite plus blob files in one directory.
pub struct SqliteStore {
    connection: Mutex<Connection>,
    blobs: PathBuf,
    /// Writes through this connection: `PRAGMA data_version` only moves for other connections'.
    own_writes: AtomicU64,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("blobs", &self.blobs)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        fs::create_dir_all(dir).map_err(|e| {
            StoreError::Io(format!(
                "cannot create the data directory {} (setting --data-dir): {e}",
                dir.display()
            ))
        })?;
        let blobs = dir.join("blobs");
        fs::create_dir_all(&blobs)?;
        remove_temp_files(&blobs);
        let connection = Connection::open(dir.join("tenants.db"))?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.execute_batch(SCHEMA)?;
        Ok(SqliteStore {
            connection: Mutex::new(connection),
            blobs,
            own_writes: AtomicU64::new(0),
        })
    }

    fn with<R>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut connection = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        let result = f(&mut connection);
        if write {
            self.own_writes.fetch_add(1, Ordering::SeqCst);
        }
        result
    }

    fn blob_path(&self, sha256: &str) -> Result<PathBuf, StoreError> {
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::Io(format!(
                "`{sha256}` is not a SHA-256 digest"
            )));
        }
        Ok(self.blobs.join(sha256))
    }
}

/// Removes the blob files among `candidates` that no version refers to any more. Runs inside
/// the caller's write transaction, so it excludes `add_plugin_version` (which checks that
/// its blob exists in its own write transaction) in this process and in any other: a blob
/// is either removed before a new version names it (that upload then stores it again) or
/// kept because one does.
fn remove_unreferenced(
    tx: &rusqlite::Transaction<'_>,
    blobs: &Path,
    candidates: &[String],
) -> Result<(), StoreError> {
    for sha256 in candidates {
        let referenced: Option<i64> = tx
            .query_row(
                "SELECT 1 FROM plugin_versions WHERE sha256 = ?1 LIMIT 1",
                [sha256],
                |row| row.get(0),
            )
            .optional()?;
        if referenced.is_none() {
            match fs::remove_file(blobs.join(sha256)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// The distinct blobs a set of version rows names.
fn blobs_of(
    tx: &rusqlite::Transaction<'_>,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<String>, StoreError> {
    let mut statement = tx.prepare(&format!(
        "SELECT DISTINCT sha256 FROM plugin_versions WHERE {filter}"
    ))?;
    let rows = statement.query_map(params, |row| row.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Removes `*.tmp` files a crash left behind (they were never renamed, so nothing names them).
fn remove_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "tmp") {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Writes `bytes` to `path` so that a crash leaves either no file or the whole file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("blob");
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn tenant_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(Tenant, String, String)> {
    Ok((
        Tenant {
            id: row.get(0)?,
            name: row.get(1)?,
            limits: Default::default(),
            settings: Default::default(),
            created_at: row.get::<_, i64>(4)? as u64,
        },
        row.get(2)?,
        row.get(3)?,
    ))
}

fn decode_tenant(
    (mut tenant, limits, settings): (Tenant, String, String),
) -> Result<Tenant, StoreError> {
    tenant.limits = serde_json::from_str(&limits)
        .map_err(|e| StoreError::Database(format!("tenant {}: bad limits: {e}", tenant.id)))?;
    tenant.settings = serde_json::from_str(&settings)
        .map_err(|e| StoreError::Database(format!("tenant {}: bad settings: {e}", tenant.id)))?;
    Ok(tenant)
}

fn key_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRecord> {
    Ok(KeyRecord {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        prefix: row.get(2)?,
        hash: row.get(3)?,
        created_at: row.get::<_, i64>(4)? as u64,
        revoked_at: row.get::<_, Option<i64>>(5)?.map(|t| t as u64),
    })
}

fn version_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PluginVersion> {
    Ok(PluginVersion {
        tenant_id: row.get(0)?,
        name: row.get(1)?,
        version: row.get::<_, i64>(2)? as u32,
        kind: row.get(3)?,
        plugin_version: row.get(4)?,
        sha256: row.get(5)?,
        size: row.get::<_, i64>(6)? as u64,
        created_at: row.get::<_, i64>(7)? as u64,
        active: row.get::<_, i64>(8)? != 0,
    })
}

fn is_unique_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::ConstraintViolation
    )
}

impl Store for SqliteStore {
    fn generation(&self) -> Result<u64, StoreError> {
        let others: i64 = self.with(false, |c| {
            Ok(c.query_row("PRAGMA data_version", [], |row| row.get(0))?)
        })?;
        Ok((others as u64).wrapping_shl(32) ^ self.own_writes.load(Ordering::SeqCst))
    }

    fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError> {
        self.with(true, |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute(
                &format!("INSERT INTO tenants ({TENANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"),
                params![
                    tenant.id,
                    tenant.name,
                    json(&tenant.limits),
                    json(&tenant.settings),
                    tenant.created_at as i64
                ],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict(format!("a tenant named `{}` exists already", tenant.name))
                } else {
                    e.into()
                }
            })?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, '1') ON CONFLICT (key) DO NOTHING",
                [HAD_TENANTS],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    fn had_tenants(&self) -> Result<bool, StoreError> {
        self.with(false, |c| {
            // A store written before the `meta` row existed had tenants if it has one now.
            Ok(c.query_row(
                "SELECT EXISTS (SELECT 1 FROM meta WHERE key = ?1) OR EXISTS (SELECT 1 FROM tenants)",
                [HAD_TENANTS],
                |row| row.get(0),
            )?)
        })
    }

    fn tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {TENANT_COLUMNS} FROM tenants ORDER BY created_at, id"
            ))?;
            let rows = statement.query_map([], tenant_from_row)?;
            rows.map(|row| decode_tenant(row?)).collect()
        })
    }

    fn tenant(&self, id: &str) -> Result<Option<Tenant>, StoreError> {
        self.with(false, |c| {
            c.query_row(
                &format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"),
                [id],
                tenant_from_row,
            )
            .optional()?
            .map(decode_tenant)
            .transpose()
        })
    }

    fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError> {
        self.with(true, |c| {
            let changed = c
                .execute(
                    "UPDATE tenants SET name = ?2, limits = ?3, settings = ?4 WHERE id = ?1",
                    params![
                        tenant.id,
                        tenant.name,
                        json(&tenant.limits),
                        json(&tenant.settings)
                    ],
                )
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        StoreError::Conflict(format!(
                            "a tenant named `{}` exists already",
                            tenant.name
                        ))
                    } else {
                        e.into()
                    }
                })?;
            Ok(changed > 0)
        })
    }

    fn delete_tenant(&self, id: &str) -> Result<bool, StoreError> {
        self.with(true, |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let blobs = blobs_of(&tx, "tenant_id = ?1", [id])?;
            let deleted = tx.execute("DELETE FROM tenants WHERE id = ?1", [id])? > 0;
            remove_unreferenced(&tx, &self.blobs, &blobs)?;
            tx.commit()?;
            Ok(deleted)
        })
    }

    fn add_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        self.with(true, |c| {
            c.execute(
                &format!("INSERT INTO keys ({KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                params![
                    key.id,
                    key.tenant_id,
                    key.prefix,
                    key.hash,
                    key.created_at as i64,
                    key.revoked_at.map(|t| t as i64)
                ],
            )?;
            Ok(())
        })
    }

    fn keys(&self, tenant_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {KEY_COLUMNS} FROM keys WHERE tenant_id = ?1 ORDER BY created_at, id"
            ))?;
            let rows = statement.query_map([tenant_id], key_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn active_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {KEY_COLUMNS} FROM keys WHERE revoked_at IS NULL"
            ))?;
            let rows = statement.query_map([], key_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn revoke_key(&self, tenant_id: &str, key_id: &str, at: u64) -> Result<bool, StoreError> {
        self.with(true, |c| {
            Ok(c.execute(
                "UPDATE keys SET revoked_at = ?3 WHERE tenant_id = ?1 AND id = ?2 AND revoked_at IS NULL",
                params![tenant_id, key_id, at as i64],
            )? > 0)
        })
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let sha256 = decide_plugins::runtime::sha256_hex(bytes);
        let path = self.blob_path(&sha256)?;
        if fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
            return Ok(sha256);
        }
        write_atomically(&path, bytes)?;
        Ok(sha256)
    }

    fn blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match fs::read(self.blob_path(sha256)?) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn add_plugin_version(&self, version: &PluginVersion) -> Result<u32, StoreError> {
        self.with(true, |c| {
            // Immediate: take the write lock first, so two connections numbering versions at
            // once wait for each other instead of failing to upgrade a read lock (SQLITE_BUSY).
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let last: Option<i64> = tx.query_row(
                "SELECT MAX(version) FROM plugin_versions WHERE tenant_id = ?1 AND name = ?2",
                params![version.tenant_id, version.name],
                |row| row.get(0),
            )?;
            let number = last.unwrap_or(0) + 1;
            // Checked under the write lock a purge also takes (see `remove_unreferenced`).
            if !self.blob_path(&version.sha256)?.exists() {
                return Err(StoreError::MissingBlob(version.sha256.clone()));
            }
            tx.execute(
                "UPDATE plugin_versions SET active = 0 WHERE tenant_id = ?1 AND name = ?2",
                params![version.tenant_id, version.name],
            )?;
            tx.execute(
                &format!(
                    "INSERT INTO plugin_versions ({VERSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1)"
                ),
                params![
                    version.tenant_id,
                    version.name,
                    number,
                    version.kind,
                    version.plugin_version,
                    version.sha256,
                    version.size as i64,
                    version.created_at as i64
                ],
            )?;
            tx.commit()?;
            Ok(number as u32)
        })
    }

    fn plugin_versions(
        &self,
        tenant_id: &str,
        name: &str,
    ) -> Result<Vec<PluginVersion>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE tenant_id = ?1 AND name = ?2 ORDER BY version"
            ))?;
            let rows = statement.query_map(params![tenant_id, name], version_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn activate_plugin_version(
        &self,
        tenant_id: &str,
        name: &str,
        version: u32,
    ) -> Result<bool, StoreError> {
        self.with(true, |c| {
            // Immediate: take the write lock first, so two connections numbering versions at
            // once wait for each other instead of failing to upgrade a read lock (SQLITE_BUSY).
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT version FROM plugin_versions WHERE tenant_id = ?1 AND name = ?2 AND version = ?3",
                    params![tenant_id, name, version],
                    |row| row.get(0),
                )
                .optional()?;
            if exists.is_none() {
                return Ok(false);
            }
            tx.execute(
                "UPDATE plugin_versions SET active = (version = ?3) WHERE tenant_id = ?1 AND name = ?2",
                params![tenant_id, name, version],
            )?;
            tx.commit()?;
            Ok(true)
        })
    }

    fn remove_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError> {
        self.with(true, |c| {
            Ok(c.execute(
                "UPDATE plugin_versions SET active = 0 WHERE tenant_id = ?1 AND name = ?2 AND active = 1",
                params![tenant_id, name],
            )? > 0)
        })
    }

    fn active_plugins(&self) -> Result<Vec<PluginVersion>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE active = 1 ORDER BY tenant_id, name"
            ))?;
            let rows = statement.query_map([], version_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn tenant_plugin_versions(&self, tenant_id: &str) -> Result<Vec<PluginVersion>, StoreError> {
        self.with(false, |c| {
            let mut statement = c.prepare(&format!(
                "SELECT {VERSION_COLUMNS} FROM plugin_versions WHERE tenant_id = ?1 ORDER BY name, version"
            ))?;
            let rows = statement.query_map([tenant_id], version_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn purge_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError> {
        self.with(true, |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let blobs = blobs_of(
                &tx,
                "tenant_id = ?1 AND name = ?2",
                params![tenant_id, name],
            )?;
            let deleted = tx.execute(
                "DELETE FROM plugin_versions WHERE tenant_id = ?1 AND name = ?2",
                params![tenant_id, name],
            )? > 0;
            remove_unreferenced(&tx, &self.blobs, &blobs)?;
            tx.commit()?;
            Ok(deleted)
        })
    }

    fn save_calibration(&self, tenant_id: &str, json: &str) -> Result<(), StoreError> {
        self.with(true, |c| {
            c.execute(
                "INSERT INTO calibrations (tenant_id, json) VALUES (?1, ?2)
                 ON CONFLICT (tenant_id) DO UPDATE SET json = excluded.json",
                params![tenant_id, json],
            )?;
            Ok(())
        })
    }

    fn calibration(&self, tenant_id: &str) -> Result<Option<String>, StoreError> {
        self.with(false, |c| {
            Ok(c.query_row(
                "SELECT json FROM calibrations WHERE tenant_id = ?1",
                [tenant_id],
                |row| row.get(0),
            )
            .optional()?)
        })
    }

    fn delete_calibration(&self, tenant_id: &str) -> Result<bool, StoreError> {
        self.with(true, |c| {
            Ok(c.execute("DELETE FROM calibrations WHERE tenant_id = ?1", [tenant_id])? > 0)
        })
    }
}
