//! Times the AMX bf16 matmul (`decide_models::amx`) against candle's f32 matmul on the
//! projection shapes of Qwen2.5-1.5B, at a few row counts.
//!
//! Run: `cargo run --release -p decide-models --example amx_bench [ROWS...]`
use std::time::Instant;

use candle_core::{Device, Tensor};
use decide_models::amx::{self, AmxWeight};

fn median_ms(mut f: impl FnMut(), runs: usize) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !amx::available() {
        println!("no AMX on this machine");
        return Ok(());
    }
    let rows: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rows = if rows.is_empty() {
        vec![16, 100, 300]
    } else {
        rows
    };
    // (name, out, in): q/o, k/v, gate/up, down of Qwen2.5-1.5B, then of Qwen2.5-0.5B.
    let shapes = [
        ("q", 1536, 1536),
        ("kv", 256, 1536),
        ("gate", 8960, 1536),
        ("down", 1536, 8960),
        ("q05q", 896, 896),
        ("q05kv", 128, 896),
        ("q05gt", 4864, 896),
        ("q05dn", 896, 4864),
    ];
    for &m in &rows {
        for &(name, n, k) in &shapes {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-4)
                .collect();
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-3)
                .collect();
            let packed = AmxWeight::pack(&w, n, k).expect("fits");
            let wt = Tensor::from_vec(w, (n, k), &Device::Cpu)?
                .t()?
                .contiguous()?;
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu)?;
            let amx_ms = median_ms(|| drop(packed.matmul(&x, m)), 9);
            let f32_ms = median_ms(|| drop(xt.matmul(&wt).unwrap()), 9);
            let gflop = 2.0 * (m * n * k) as f64 / 1e9;
            println!(
                "m {m:4} {name:5} {n:5}x{k:5}: amx {amx_ms:7.3} ms ({:6.0} GFLOP/s), f32 {f32_ms:7.3} ms ({:5.0} GFLOP/s), x{:.1}",
                gflop / amx_ms * 1e3,
                gflop / f32_ms * 1e3,
                f32_ms / amx_ms
            );
        }
    }
    Ok(())
}
