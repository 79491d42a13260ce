//! The contract every [`Store`] keeps, as tests run against each implementation: the
//! embedded SQLite store always, Postgres when `DECIDE_TEST_POSTGRES_URL` names a server
//! (`scripts/replicas-test.sh` starts one from Debian's packages and sets it; without it the
//! Postgres tests say so and return).
//!
//! Each check gets `open`, which opens another handle on one fresh, empty store (another
//! connection to the same directory or database), so what one handle writes is read back
//! through another, as a restarted server or another replica would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::store::{KeyRecord, PluginVersion, Store, StoreError, Tenant, TenantLimits};

type Open = dyn Fn() -> Arc<dyn Store>;

fn tenant(id: &str, name: &str) -> Tenant {
    Tenant {
        id: id.into(),
        name: name.into(),
        limits: TenantLimits {
            requests_per_minute: Some(60),
            ..Default::default()
        },
        settings: Default::default(),
        created_at: 1,
    }
}

fn version(name: &str, sha256: &str) -> PluginVersion {
    PluginVersion {
        tenant_id: "tn_a".into(),
        name: name.into(),
        version: 0,
        kind: "question-type".into(),
        plugin_version: "1.0.0".into(),
        sha256: sha256.into(),
        size: 3,
        created_at: 2,
        active: true,
    }
}

fn key(id: &str, tenant_id: &str, hash: &str) -> KeyRecord {
    KeyRecord {
        id: id.into(),
        tenant_id: tenant_id.into(),
        prefix: "dk_12345678".into(),
        hash: hash.into(),
        created_at: 1,
        revoked_at: None,
    }
}

/// Tenants, keys, plugin versions and blobs written through one handle are read back whole
/// through another; rollback, revocation and deletion cascade as documented.
fn records_survive_another_handle(open: &Open) {
    {
        let store = open();
        store.create_tenant(&tenant("tn_a", "alpha")).unwrap();
        assert!(matches!(
            store.create_tenant(&tenant("tn_b", "alpha")),
            Err(StoreError::Conflict(_))
        ));
        store
            .add_key(&key("key_1", "tn_a", &"ab".repeat(32)))
            .unwrap();
        let sha = store.put_blob(b"one").unwrap();
        assert_eq!(
            store
                .add_plugin_version(&version("openai-x", &sha))
                .unwrap(),
            1
        );
        let sha2 = store.put_blob(b"two").unwrap();
        assert_eq!(
            store
                .add_plugin_version(&version("openai-x", &sha2))
                .unwrap(),
            2
        );
    }
    let store = open();
    assert_eq!(
        store.tenants().unwrap()[0].limits.requests_per_minute,
        Some(60)
    );
    assert_eq!(store.tenant("tn_a").unwrap().unwrap().name, "alpha");
    assert!(store.tenant("tn_zz").unwrap().is_none());
    assert_eq!(store.active_keys().unwrap().len(), 1);
    let active = store.active_plugins().unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].version, 2);
    assert_eq!(store.blob(&active[0].sha256).unwrap().unwrap(), b"two");
    let versions = store.plugin_versions("tn_a", "openai-x").unwrap();
    assert_eq!(
        versions
            .iter()
            .map(|v| (v.version, v.active))
            .collect::<Vec<_>>(),
        [(1, false), (2, true)]
    );
    assert!(store
        .activate_plugin_version("tn_a", "openai-x", 1)
        .unwrap());
    assert_eq!(store.active_plugins().unwrap()[0].version, 1);
    assert!(!store
        .activate_plugin_version("tn_a", "openai-x", 9)
        .unwrap());
    assert_eq!(store.active_plugins().unwrap()[0].version, 1);
    assert!(store.remove_plugin("tn_a", "openai-x").unwrap());
    assert!(!store.remove_plugin("tn_a", "openai-x").unwrap());
    assert!(store.active_plugins().unwrap().is_empty());
    assert!(store.revoke_key("tn_a", "key_1", 5).unwrap());
    assert!(!store.revoke_key("tn_a", "key_1", 6).unwrap());
    assert!(store.active_keys().unwrap().is_empty());
    assert_eq!(store.keys("tn_a").unwrap()[0].revoked_at, Some(5));
    store.save_calibration("tn_a", "{\"t\":1}").unwrap();
    store.save_calibration("tn_a", "{\"t\":2}").unwrap();
    assert_eq!(
        store.calibration("tn_a").unwrap().as_deref(),
        Some("{\"t\":2}")
    );
    assert!(store.delete_tenant("tn_a").unwrap());
    assert!(!store.delete_tenant("tn_a").unwrap());
    assert!(store.keys("tn_a").unwrap().is_empty());
    assert!(store
        .plugin_versions("tn_a", "openai-x")
        .unwrap()
        .is_empty());
    assert!(store.calibration("tn_a").unwrap().is_none());
}

/// Renames keep names unique; an unknown tenant is not updated; blobs are content-addressed.
fn updates_and_blobs(open: &Open) {
    let store = open();
    store.create_tenant(&tenant("tn_a", "alpha")).unwrap();
    store.create_tenant(&tenant("tn_b", "beta")).unwrap();
    let mut renamed = tenant("tn_b", "alpha");
    assert!(matches!(
        store.update_tenant(&renamed),
        Err(StoreError::Conflict(_))
    ));
    renamed.name = "gamma".into();
    renamed.limits.max_plugins = Some(3);
    assert!(store.update_tenant(&renamed).unwrap());
    assert!(!store.update_tenant(&tenant("tn_zz", "zeta")).unwrap());
    let other = open();
    assert_eq!(other.tenant("tn_b").unwrap().unwrap(), renamed);
    let bytes = vec![7u8; 100_000];
    let sha = store.put_blob(&bytes).unwrap();
    assert_eq!(sha, decide_plugins::runtime::sha256_hex(&bytes));
    assert_eq!(other.put_blob(&bytes).unwrap(), sha);
    assert_eq!(other.blob(&sha).unwrap().unwrap(), bytes);
    assert!(other.blob(&"0".repeat(64)).unwrap().is_none());
    assert!(!store.delete_calibration("tn_a").unwrap());
}

/// A purge drops a plugin's every version and the blobs no version of any tenant refers to
/// any more; deleting a tenant drops its blobs the same way; a version whose blob a purge
/// removed is refused (`MissingBlob`) until the blob is stored again; and the store remembers
/// that it had tenants after the last is deleted.
fn purges_remove_unreferenced_blobs(open: &Open) {
    let store = open();
    assert!(!store.had_tenants().unwrap());
    store.create_tenant(&tenant("tn_a", "alpha")).unwrap();
    store.create_tenant(&tenant("tn_b", "beta")).unwrap();
    let own = store.put_blob(b"a's own").unwrap();
    let shared = store.put_blob(b"shared").unwrap();
    store
        .add_plugin_version(&version("openai-x", &own))
        .unwrap();
    store
        .add_plugin_version(&version("openai-x", &shared))
        .unwrap();
    let b_version = |sha: &str| PluginVersion {
        tenant_id: "tn_b".into(),
        ..version("openai-x", sha)
    };
    store.add_plugin_version(&b_version(&shared)).unwrap();
    assert_eq!(store.tenant_plugin_versions("tn_a").unwrap().len(), 2);

    let other = open();
    assert!(other.purge_plugin("tn_a", "openai-x").unwrap());
    assert!(!other.purge_plugin("tn_a", "openai-x").unwrap());
    assert!(store
        .plugin_versions("tn_a", "openai-x")
        .unwrap()
        .is_empty());
    assert!(
        store.blob(&own).unwrap().is_none(),
        "an unreferenced blob stays"
    );
    assert!(
        store.blob(&shared).unwrap().is_some(),
        "b's blob was removed"
    );
    assert!(matches!(
        store.add_plugin_version(&version("openai-x", &own)),
        Err(StoreError::MissingBlob(_))
    ));
    assert!(store
        .plugin_versions("tn_a", "openai-x")
        .unwrap()
        .is_empty());

    assert!(store.delete_tenant("tn_b").unwrap());
    assert!(
        store.blob(&shared).unwrap().is_none(),
        "the deleted tenant's blob stays"
    );
    assert!(store.delete_tenant("tn_a").unwrap());
    assert!(store.tenants().unwrap().is_empty());
    assert!(
        open().had_tenants().unwrap(),
        "the store forgot it had tenants"
    );
}

/// Another handle's write moves the generation, and `wait_for_change` returns the moved one.
fn another_handles_write_moves_the_generation(open: &Open, within: Duration) {
    let server = open();
    let before = server.generation().unwrap();
    let cli = open();
    cli.create_tenant(&tenant("tn_c", "gamma")).unwrap();
    let started = Instant::now();
    let after = server.wait_for_change(before, within).unwrap();
    assert_ne!(after, before, "no change seen within {within:?}");
    assert!(started.elapsed() <= within + Duration::from_millis(200));
}

/// Uploads of one name through two handles at once get distinct, gapless numbers.
fn concurrent_versions_are_numbered_once(open: &Open) {
    let setup = open();
    setup.create_tenant(&tenant("tn_a", "alpha")).unwrap();
    let sha = setup.put_blob(b"one").unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let store = open();
            let sha = sha.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| {
                        store
                            .add_plugin_version(&version("openai-x", &sha))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut numbers: Vec<u32> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    numbers.sort();
    assert_eq!(numbers, (1..=20).collect::<Vec<_>>());
    let active = setup.active_plugins().unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].version, 20);
}

mod sqlite {
    use super::*;

    static DIRS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn fresh() -> Box<Open> {
        let dir = std::env::temp_dir().join(format!(
            "decide-contract-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Box::new(move || Arc::new(SqliteStore::open(&dir).unwrap()) as Arc<dyn Store>)
    }

    #[test]
    fn records_survive_a_reopen() {
        records_survive_another_handle(&*fresh());
    }

    #[test]
    fn updates_and_blobs_hold() {
        updates_and_blobs(&*fresh());
    }

    #[test]
    fn another_connections_write_moves_the_generation() {
        another_handles_write_moves_the_generation(&*fresh(), Duration::from_millis(50));
    }

    #[test]
    fn concurrent_versions_get_distinct_numbers() {
        concurrent_versions_are_numbered_once(&*fresh());
    }

    #[test]
    fn purges_remove_unreferenced_blobs_only() {
        purges_remove_unreferenced_blobs(&*fresh());
    }
}

mod postgres {
    use super::*;

    /// A fresh database on the server `DECIDE_TEST_POSTGRES_URL` names, or `None` (with a
    /// message) when it is not set.
    fn fresh(test: &str) -> Option<Box<Open>> {
        let Ok(url) = std::env::var("DECIDE_TEST_POSTGRES_URL") else {
            eprintln!("skipped {test}: set DECIDE_TEST_POSTGRES_URL (scripts/replicas-test.sh starts a server and sets it)");
            return None;
        };
        let mut config: tokio_postgres::Config = url.parse().expect("DECIDE_TEST_POSTGRES_URL");
        // `admin` creates the test's database on the server's own; `config` then opens it.
        let name = format!("decide_contract_{}_{test}", std::process::id());
        let admin = config.clone();
        config.dbname(&name);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let (client, connection) = admin.connect(tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                for statement in [
                    format!("DROP DATABASE IF EXISTS {name}"),
                    format!("CREATE DATABASE {name}"),
                ] {
                    client.batch_execute(&statement).await.unwrap();
                }
            });
        Some(Box::new(move || {
            Arc::new(PostgresStore::open_config(config.clone()).unwrap()) as Arc<dyn Store>
        }))
    }

    #[test]
    fn records_survive_another_connection() {
        if let Some(open) = fresh("records") {
            records_survive_another_handle(&*open);
        }
    }

    #[test]
    fn updates_and_blobs_hold() {
        if let Some(open) = fresh("updates") {
            updates_and_blobs(&*open);
        }
    }

    #[test]
    fn another_replicas_write_is_notified_at_once() {
        if let Some(open) = fresh("notify") {
            // LISTEN/NOTIFY wakes the waiter; the timeout is far above what it takes.
            another_handles_write_moves_the_generation(&*open, Duration::from_secs(2));
        }
    }

    #[test]
    fn concurrent_versions_get_distinct_numbers() {
        if let Some(open) = fresh("concurrent") {
            concurrent_versions_are_numbered_once(&*open);
        }
    }

    #[test]
    fn purges_remove_unreferenced_blobs_only() {
        if let Some(open) = fresh("purges") {
            purges_remove_unreferenced_blobs(&*open);
        }
    }

    /// Two replicas' takes come out of one bucket: five a minute means five in all.
    #[test]
    fn rate_buckets_are_shared_by_replicas() {
        use crate::shared_rates::Take;
        let Some(open) = fresh("rates") else {
            return;
        };
        let (a, b) = (
            open().shared_rates().unwrap(),
            open().shared_rates().unwrap(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let take = |rates: &std::sync::Arc<dyn crate::shared_rates::SharedRates>, n| {
            runtime.block_on(rates.take("tn_a/requests_per_minute/5".into(), n, 5))
        };
        assert_eq!(take(&a, 3).unwrap(), Take::Taken { remaining: 2 });
        assert!(matches!(
            take(&b, 2).unwrap(),
            Take::Taken { remaining: 0 | 1 }
        ));
        match take(&a, 1).unwrap() {
            // One cell refills every 12 s.
            Take::Refused { wait } => assert!(wait <= Duration::from_secs(12), "{wait:?}"),
            other => panic!("the sixth request of five a minute passed: {other:?}"),
        }
        assert!(matches!(
            runtime
                .block_on(b.take("tn_b/requests_per_minute/5".into(), 5, 5))
                .unwrap(),
            Take::Taken { .. }
        ));
    }

    #[test]
    fn a_bad_url_names_the_setting() {
        let error = PostgresStore::open("mysql://nope").unwrap_err().to_string();
        assert!(error.contains("--store"), "{error}");
    }
}
