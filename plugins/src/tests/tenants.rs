//! The tenant layers of the registry: resolution order, isolation, kind-keeping, per-request
//! pinning across a swap, removal, and a tenant's own limits on its plugins' calls.

use std::sync::Arc;

use super::*;
use crate::TenantPluginLimits;

const Q: &str = r#"{"type":"predicate","instructions":"Is it raining?"}"#;

/// `probability` of the predicate plugin `name` as `scope` sees it, for scores (0.25, 0.75):
/// 0.25 from the built-in, 0.75 from `predicate-inverted`.
fn p(registry: &PluginRegistry, scope: Option<&str>, name: &str) -> f64 {
    registry
        .question_type_in(scope, name)
        .unwrap()
        .answer(Q, &[0.25, 0.75])
        .unwrap()["probability"]
        .as_f64()
        .unwrap()
}

fn install(registry: &PluginRegistry, tenant: &str, name: &str, guest: &str, version: u32) {
    let bytes = std::fs::read(test_guest(guest)).unwrap();
    let (plugin, report) = registry.check_for_tenant(
        tenant,
        &TenantPluginLimits::default(),
        name,
        &bytes,
        (MAX_COMPONENT_BYTES, "test".into()),
    );
    assert!(report.problems.is_empty(), "{report:?}");
    registry.install_for_tenant(tenant, name, plugin.unwrap(), version);
}

#[test]
fn a_tenant_resolves_its_own_then_the_operators_then_the_builtin_and_never_anothers() {
    let dir = scratch_dir("tenant-layers");
    deploy(&test_guest("predicate-inverted"), &dir, "operator-only");
    let registry =
        PluginRegistry::with_builtins(PluginRuntime::new(config(Some(dir.clone()))).unwrap())
            .unwrap();
    registry.poll_once();

    install(
        &registry,
        "tn_a",
        "openai-predicate",
        "predicate-inverted",
        1,
    );
    install(&registry, "tn_a", "a-only", "predicate-inverted", 1);
    assert_eq!(p(&registry, Some("tn_a"), "openai-predicate"), 0.75);
    assert_eq!(p(&registry, Some("tn_b"), "openai-predicate"), 0.25);
    assert_eq!(p(&registry, None, "openai-predicate"), 0.25);
    // The operator's plugins are everyone's; a tenant's are its own.
    assert_eq!(p(&registry, Some("tn_b"), "operator-only"), 0.75);
    assert!(registry.question_type_in(Some("tn_b"), "a-only").is_none());
    assert!(registry.question_type_in(None, "a-only").is_none());

    let source_in = |scope: Option<&str>, name: &str| {
        registry
            .list_for(scope)
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.source)
    };
    assert_eq!(
        source_in(Some("tn_a"), "openai-predicate"),
        Some(PluginSource::Tenant { version: 1 })
    );
    assert_eq!(
        source_in(Some("tn_b"), "openai-predicate"),
        Some(PluginSource::Builtin)
    );
    assert_eq!(source_in(Some("tn_b"), "a-only"), None);
    assert_eq!(
        source_in(Some("tn_a"), "operator-only"),
        Some(PluginSource::File(dir.join("operator-only.wasm")))
    );
    let json = serde_json::to_value(registry.list_for(Some("tn_a"))).unwrap();
    let sources: std::collections::HashSet<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        ["builtin", "operator", "tenant"].into_iter().collect()
    );

    // A replacement keeps the kind of what it replaces for that tenant.
    let bytes = std::fs::read(test_guest("predicate-inverted")).unwrap();
    let (plugin, report) = registry.check_for_tenant(
        "tn_a",
        &TenantPluginLimits::default(),
        "temperature",
        &bytes,
        (MAX_COMPONENT_BYTES, "test".into()),
    );
    assert!(plugin.is_none());
    assert_eq!(report.problems[0].check, "kind", "{report:?}");

    // A request keeps the version it resolved first, across a swap.
    let session = Session::new();
    let first = registry
        .question_type_for(&session, Some("tn_a"), "openai-predicate")
        .unwrap();
    install(&registry, "tn_a", "openai-predicate", "openai-predicate", 2);
    let again = registry
        .question_type_for(&session, Some("tn_a"), "openai-predicate")
        .unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(
        p(&registry, Some("tn_a"), "openai-predicate"),
        0.25,
        "new lookups see version 2"
    );

    // Removal falls back; a deleted tenant's plugins are gone.
    assert!(registry.remove_for_tenant("tn_a", "openai-predicate"));
    assert!(!registry.remove_for_tenant("tn_a", "openai-predicate"));
    assert_eq!(
        source_in(Some("tn_a"), "openai-predicate"),
        Some(PluginSource::Builtin)
    );
    assert_eq!(registry.remove_tenant("tn_a"), 1);
    assert!(registry.question_type_in(Some("tn_a"), "a-only").is_none());
}

#[test]
fn a_tenants_limits_bound_its_plugins_calls_and_changes_reach_loaded_plugins() {
    let registry =
        PluginRegistry::with_builtins(PluginRuntime::new(config(None)).unwrap()).unwrap();
    let limits = TenantPluginLimits {
        plugin_timeout_ms: Some(100),
        ..TenantPluginLimits::default()
    };
    let bytes = std::fs::read(test_guest("spin-question")).unwrap();
    let (plugin, report) = registry.check_for_tenant(
        "tn_a",
        &limits,
        "spin",
        &bytes,
        (MAX_COMPONENT_BYTES, "test".into()),
    );
    assert!(report.problems.is_empty(), "{report:?}");
    registry.install_for_tenant("tn_a", "spin", plugin.unwrap(), 1);
    let message = |registry: &PluginRegistry| match registry
        .question_type_in(Some("tn_a"), "spin")
        .unwrap()
        .compile(r#"{"type":"spin","instructions":"loop"}"#)
    {
        Err(PluginCallError::Failed { message, .. }) => message,
        other => panic!("the spin plugin must fail: {other:?}"),
    };
    let started = Instant::now();
    let first = message(&registry);
    assert!(
        first.contains("100 ms") && first.contains("the tenant's limit plugin_timeout_ms"),
        "{first}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "the 1000 ms server deadline did not apply"
    );

    // The tenant's limit changes (the admin API): the loaded plugin's next call gets it.
    registry.set_tenant_limits_lookup(Arc::new(|_tenant: &str| {
        Some(TenantPluginLimits {
            plugin_timeout_ms: Some(200),
            ..TenantPluginLimits::default()
        })
    }));
    let second = message(&registry);
    assert!(second.contains("200 ms"), "{second}");
    // A tenant limit above the server's is the server's.
    registry.set_tenant_limits_lookup(Arc::new(|_tenant: &str| {
        Some(TenantPluginLimits {
            plugin_timeout_ms: Some(60_000),
            ..TenantPluginLimits::default()
        })
    }));
    let third = message(&registry);
    assert!(
        third.contains("1000 ms") && third.contains("--plugin-timeout-ms"),
        "{third}"
    );
}
