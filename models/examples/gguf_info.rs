//! Prints a GGUF file's metadata (arrays summarised) and tensor list.
//!
//! Run: `cargo run --release -p decide-models --example gguf_info -- .models/smol.gguf`
use candle_core::quantized::gguf_file::{Content, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: gguf_info FILE.gguf")?;
    let mut f = std::fs::File::open(&path)?;
    let ct = Content::read(&mut f)?;
    let mut keys: Vec<_> = ct.metadata.keys().collect();
    keys.sort();
    for k in keys {
        match &ct.metadata[k] {
            Value::Array(a) => {
                let head: Vec<String> = a.iter().take(20).map(|v| format!("{v:?}")).collect();
                println!("{k} = [{} values] {}", a.len(), head.join(", "));
            }
            Value::String(s) => println!("{k} = {s:?}"),
            v => println!("{k} = {v:?}"),
        }
    }
    let mut names: Vec<_> = ct.tensor_infos.iter().collect();
    names.sort_by_key(|(n, _)| n.to_string());
    for (n, info) in names
        .iter()
        .filter(|(n, _)| !n.starts_with("blk.") || n.starts_with("blk.0."))
    {
        println!("tensor {n}: {:?} {:?}", info.ggml_dtype, info.shape);
    }
    Ok(())
}
