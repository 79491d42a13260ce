//! Builds the guest plugins (the `guests/` workspace) for `wasm32-wasip2` and embeds the
//! built-ins into the binary.
//!
//! The guests are a separate cargo workspace built by a nested `cargo build` into
//! `<root>/target/guests`, so that:
//! - the host's native flags (`-C target-cpu=native`, CUDA `RUSTFLAGS`) never reach wasm: every
//!   flag and build variable the outer cargo hands to this script is removed from the nested
//!   build's environment;
//! - the nested build has its own lock (its own target dir) and cannot deadlock on the outer
//!   build's `target/release` lock.
//!
//! Outputs:
//! - `$OUT_DIR/builtin_plugins.rs`: `BUILTIN_PLUGINS: &[(&str, PluginKind, &[u8])]`, the fourteen
//!   built-ins embedded with `include_bytes!` (included by `src/lib.rs`);
//! - `$OUT_DIR/guests/<name>.wasm`: every built guest, test-only ones included, under its plugin
//!   name; `DECIDE_TEST_GUESTS_DIR` points there so tests can copy guests into a plugins dir
//!   (other crates' tests read it as [`builtin::TEST_GUESTS_DIR`]).

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Built-in plugins: (plugin name, kind variant). The crate name is the plugin name.
const BUILTINS: &[(&str, &str)] = &[
    ("openai-predicate", "QuestionType"),
    ("openai-choice", "QuestionType"),
    ("openai-score", "QuestionType"),
    ("systemone-noul", "QuestionType"),
    ("systemone-choice", "QuestionType"),
    ("systemone-score", "QuestionType"),
    ("direct-options", "Renderer"),
    ("options-first", "Renderer"),
    ("restated", "Renderer"),
    ("plain-letter", "Renderer"),
    ("framed", "Renderer"),
    ("temperature", "Calibration"),
    ("bias-temperature", "Calibration"),
    ("contextual", "Calibration"),
];

/// Test-only guests (not embedded): copied to `DECIDE_TEST_GUESTS_DIR`.
const TEST_GUESTS: &[&str] = &[
    "predicate-inverted",
    "trap-question",
    "spin-question",
    "hog-question",
    "broken-example",
    // The temperature policy built against the 0.1.0 contract (wit/compat/0.1.0).
    "temperature-v010",
    // The third-party example of guests/examples/, uploaded by the tenant-plugin tests.
    "openai-sentiment",
];

const WASM_TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("plugins/ has a parent")
        .to_path_buf();
    let guests = root.join("guests");
    let wit = root.join("wit");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    rerun_if_changed(&guests, &wit);
    check_wasm_target();

    let target_dir = root.join("target").join("guests");
    build_guests(&guests, &target_dir);

    let built = target_dir.join(WASM_TARGET).join("release");
    let guests_out = out_dir.join("guests");
    fs::create_dir_all(&guests_out).expect("create $OUT_DIR/guests");
    let all = BUILTINS
        .iter()
        .map(|(name, _)| *name)
        .chain(TEST_GUESTS.iter().copied());
    for name in all {
        let from = built.join(format!("{}.wasm", name.replace('-', "_")));
        let to = guests_out.join(format!("{name}.wasm"));
        fs::copy(&from, &to)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    }

    let mut generated = String::from(
        "/// The built-in plugins, embedded at build time by `plugins/build.rs`: (name, kind, component bytes).\n\
         pub static BUILTIN_PLUGINS: &[(&str, PluginKind, &[u8])] = &[\n",
    );
    for (name, kind) in BUILTINS {
        let path = guests_out.join(format!("{name}.wasm"));
        writeln!(
            generated,
            "    ({name:?}, PluginKind::{kind}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    generated.push_str("];\n");
    fs::write(out_dir.join("builtin_plugins.rs"), generated).expect("write builtin_plugins.rs");

    println!(
        "cargo:rustc-env=DECIDE_TEST_GUESTS_DIR={}",
        guests_out.display()
    );
}

/// Rebuild when the guest sources or the WIT contract change. Each top-level entry of
/// `guests/` is watched (cargo scans directories recursively) except build output
/// (`guests/target/`, made by the guests' own native unit tests), so running those tests does
/// not trigger a host rebuild. A new guest crate shows up as a change of `guests/Cargo.toml`.
fn rerun_if_changed(guests: &Path, wit: &Path) {
    println!("cargo:rerun-if-changed={}", wit.display());
    let entries = fs::read_dir(guests).unwrap_or_else(|e| panic!("read {}: {e}", guests.display()));
    for entry in entries.flatten() {
        if entry.file_name() == "target" {
            continue;
        }
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
}

/// Fail early with the fix when the wasm target's standard library is not installed.
fn check_wasm_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(sysroot) = sysroot {
        if !sysroot
            .join("lib")
            .join("rustlib")
            .join(WASM_TARGET)
            .is_dir()
        {
            panic!(
                "the {WASM_TARGET} standard library is missing from {}: install the wasm target: rustup target add {WASM_TARGET}",
                sysroot.display()
            );
        }
    }
}

/// Is `key` a variable the outer build sets for this script or for native compilation, which
/// must not leak into the nested wasm build?
fn leaks(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_TARGET_DIR",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_CRATE_NAME",
        "CARGO_RUSTC_CURRENT_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "CARGO_PKG_",
        "CARGO_PROFILE_",
        "DEP_",
    ];
    EXACT.contains(&key)
        || PREFIXES.iter().any(|p| key.starts_with(p))
        || (key.starts_with("CARGO_TARGET_") && key.ends_with("_RUSTFLAGS"))
}

fn build_guests(guests: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(guests)
        .arg("build")
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .args(["--target", WASM_TARGET, "--release", "--workspace"])
        .arg("--target-dir")
        .arg(target_dir);
    for (key, _) in env::vars_os() {
        if let Some(key) = key.to_str() {
            if leaks(key) {
                command.env_remove(key);
            }
        }
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run cargo to build the guests: {e}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("can't find crate for `core`")
            || stderr.contains("target may not be installed")
        {
            panic!("building the guest plugins failed: install the wasm target: rustup target add {WASM_TARGET}\n{stderr}");
        }
        panic!("building the guest plugins (guests/, target {WASM_TARGET}) failed:\n{stderr}");
    }
}
