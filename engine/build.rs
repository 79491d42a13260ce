//! Embeds the tuning results the project measured (`calibration/tuned/*.json`) into the
//! binary (`tune::store` reads them). The guest plugins are built by `plugins/build.rs`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("engine/ has a parent");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    write_tuned_seeds(&root.join("calibration").join("tuned"), &out_dir);
}

/// `$OUT_DIR/tuned_seeds.rs`: `TUNED_SEEDS: &[(&str, &str)]`, every `calibration/tuned/*.json`
/// (tuning results the project measured, shipped in the binary; see `src/tune/store.rs`).
fn write_tuned_seeds(dir: &Path, out_dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut generated = String::from(
        "/// Tuning results shipped in the binary (`calibration/tuned/`): (file name, JSON).\n\
         pub static TUNED_SEEDS: &[(&str, &str)] = &[\n",
    );
    for file in files {
        println!("cargo:rerun-if-changed={}", file.display());
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        writeln!(
            generated,
            "    ({name:?}, include_str!({:?})),",
            file.display().to_string()
        )
        .unwrap();
    }
    generated.push_str("];\n");
    fs::write(out_dir.join("tuned_seeds.rs"), generated).expect("write tuned_seeds.rs");
}
