//! Every supported family against transformers, in both formats: tiny checkpoints with random
//! weights and each family's real structure (`models/tests/fixtures/<family>/`, written by
//! `scripts/make-tiny-models.py`, which also recorded what transformers computes from them).
//!
//! Per family and format: decide's logits (f32, CPU; on the GPU machine also on CUDA,
//! [`setups`]) at every position of every prompt equal
//! transformers' within [`TOLERANCE`] at the recorded vocabulary columns, and so does each
//! position's log-sum-exp over the whole vocabulary. transformers' values were computed in
//! f64 (its own f32 logits are recorded as at most 5e-5 from those: a fixture whose f32
//! rounding were larger could not test 1e-4); the prompts are random ids plus one text through
//! the fixtures' tokenizer (SmolLM2's byte-level BPE cut to 512 tokens, which keeps each
//! fixture under 2 MB), whose ids must be `tokenizers`' own; a label read runs and agrees
//! with the logits; and a prompt read as a cached prefix plus a suffix, or packed beside
//! another, gives the logits of one pass (the cache and packing paths are where sliding
//! windows and per-layer RoPE tables could go wrong).
//!
//! Chat templates: decide's rendering of the templates and tokenizers the project's GGUF files
//! carry (`.models/q05.gguf`: Qwen2.5's; `.models/smol.gguf`: SmolLM2's) has exactly
//! transformers' `apply_chat_template` ids (`fixtures/templates.json`); skipped when the files
//! are absent.

use std::path::PathBuf;

use candle_core::{Device, IndexOp, Tensor};
use decide_models::{ChatMessage, Kernels, LoadOptions, Model, Prompter, Segment, WeightFormat};
use serde_json::Value;

/// Largest difference allowed between decide's and transformers' logits.
const TOLERANCE: f32 = 1e-4;

fn fixture(family: &str) -> PathBuf {
    // On the GPU machine the test binary runs far from its source tree.
    std::env::var_os("DECIDE_FIXTURES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .join(family)
}

fn expected(family: &str) -> Value {
    let text = std::fs::read_to_string(fixture(family).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Hf,
    Gguf,
}

/// Where and how a family's checks run. On the CPU (CI): f32 weights, [`TOLERANCE`]. With
/// `DECIDE_TEST_DEVICE=cuda` (a `cuda` build on the GPU machine) also twice on CUDA: candle's
/// ops on f32 weights, and what serves the family there (bf16 weights, through the fused
/// kernels where the family allows it), within bf16 rounding.
struct Setup {
    name: &'static str,
    device: Device,
    options: LoadOptions,
    /// Largest logit (and log-sum-exp) difference from transformers', relative to the
    /// prompt's largest |logit| (at least 1).
    tolerance: f32,
    /// Largest difference between two ways of reading the same rows (a cached prefix and a
    /// suffix, a packed pass, a label read) and one pass, on the same scale.
    consistency: f32,
}

fn setups() -> Vec<Setup> {
    let f32_weights = LoadOptions {
        weights: WeightFormat::F32,
        ..LoadOptions::default()
    };
    if std::env::var("DECIDE_TEST_DEVICE").as_deref() != Ok("cuda") {
        return vec![Setup {
            name: "cpu",
            device: Device::Cpu,
            options: LoadOptions::default(),
            tolerance: TOLERANCE,
            consistency: 1e-4,
        }];
    }
    let cuda = Device::new_cuda(0).expect("DECIDE_TEST_DEVICE=cuda needs a CUDA device");
    vec![
        Setup {
            name: "cuda candle-ops f32",
            device: cuda.clone(),
            options: LoadOptions {
                kernels: Kernels::Candle,
                ..f32_weights
            },
            tolerance: 1e-3,
            consistency: 1e-3,
        },
        // bf16 keeps 8 bits of mantissa: queries, keys, values and every projection's
        // inputs round to ~0.4%, over 2-6 layers.
        Setup {
            name: "cuda served bf16",
            device: cuda,
            options: LoadOptions {
                weights: WeightFormat::BF16,
                ..LoadOptions::default()
            },
            tolerance: 0.05,
            consistency: 0.03,
        },
    ]
}

fn load(family: &str, format: Format, setup: &Setup) -> Model {
    let path = match format {
        Format::Hf => fixture(family).join("hf"),
        Format::Gguf => fixture(family).join("model.gguf"),
    };
    Model::load_with(&path, &setup.device, &setup.options)
        .unwrap_or_else(|e| panic!("{family} {format:?} does not load ({}): {e}", setup.name))
}

/// Logits `(n, vocab)` at every position of `ids` in one pass, on the CPU.
fn all_logits(m: &Model, ids: &[u32]) -> Tensor {
    let rows: Vec<usize> = (0..ids.len()).collect();
    let (hidden, _) = m.forward(ids, 0, None, &rows).unwrap();
    m.logits(&hidden).unwrap().to_device(&Device::Cpu).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    max_abs(&(a - b).unwrap())
}

fn max_abs(a: &Tensor) -> f32 {
    a.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The whole check of one family in one format, in every [`setups`]; returns the largest
/// logit difference.
fn check(family: &str, format: Format) -> f32 {
    let mut worst = 0f32;
    for setup in setups() {
        worst = worst.max(check_on(family, format, &setup));
    }
    worst
}

fn check_on(family: &str, format: Format, setup: &Setup) -> f32 {
    let m = load(family, format, setup);
    let what = format!("{family} {format:?} [{}: {}]", setup.name, m.info().forward);
    let exp = expected(family);
    let mut worst = 0f32;
    for (k, p) in exp["prompts"].as_array().unwrap().iter().enumerate() {
        let ids = ids_of(&p["ids"]);
        if let Some(text) = p["text"].as_str() {
            // The small vocabulary's tokenizer (tokenizer.json, or the GGUF metadata) gives
            // the ids `tokenizers` gave.
            assert_eq!(
                m.prompter().tokenize_plain(text).unwrap(),
                ids,
                "{what}: tokenizer"
            );
        }
        let ours = all_logits(&m, &ids);
        let cols: Vec<u32> = ids_of(&p["columns"]);
        let picked = ours
            .index_select(&Tensor::new(cols.as_slice(), &Device::Cpu).unwrap(), 1)
            .unwrap();
        let theirs: Vec<Vec<f32>> = serde_json::from_value(p["logits"].clone()).unwrap();
        let theirs = Tensor::new(theirs, &Device::Cpu).unwrap();
        let scale = max_abs(&theirs).max(1.0);
        let (tolerance, consistency) = (setup.tolerance * scale, setup.consistency * scale);
        // A label read at the last position, checked against the full logits.
        let label_ids = [ids[0], (ids[0] + 1) % exp["vocab"].as_u64().unwrap() as u32];
        let read = m.read(&ids, &label_ids).unwrap();
        let last = ours.i(ids.len() - 1).unwrap();
        let logsm = candle_nn::ops::log_softmax(&last, 0).unwrap();
        for (lp, &id) in read.logprobs.iter().zip(&label_ids) {
            let want = logsm.i(id as usize).unwrap().to_scalar::<f32>().unwrap();
            let bound = if setup.device.is_cpu() {
                1e-5
            } else {
                consistency
            };
            assert!(
                (lp - want).abs() < bound,
                "{what}: read {lp} vs logits {want}"
            );
        }
        assert!(read.option_mass > 0.0 && read.option_mass <= 1.0 + 1e-6);
        let d_logits = max_diff(&picked, &theirs);
        let lse: Vec<f32> = serde_json::from_value(p["logsumexp"].clone()).unwrap();
        let ours_lse = ours.exp().unwrap().sum(1).unwrap().log().unwrap();
        let d_lse = max_diff(&ours_lse, &Tensor::new(lse, &Device::Cpu).unwrap());
        eprintln!(
            "{what} prompt {k} ({} tokens): max |logit diff| {d_logits:.2e}, \
             max |logsumexp diff| {d_lse:.2e} (largest |logit| {scale:.2})",
            ids.len()
        );
        assert!(
            d_logits <= tolerance && d_lse <= tolerance,
            "{what} prompt {k}: logits differ from transformers' by {d_logits}, \
             log-sum-exp by {d_lse} (allowed {tolerance})"
        );
        worst = worst.max(d_logits).max(d_lse);

        // A cached prefix plus a suffix, and the suffix packed beside another segment, read
        // what one pass reads.
        let cut = ids.len() / 2;
        let (_, cache) = m.forward(&ids[..cut], 0, None, &[]).unwrap();
        let rows: Vec<usize> = (0..ids.len() - cut).collect();
        let (hidden, _) = m.forward(&ids[cut..], cut, Some(&cache), &rows).unwrap();
        let split = m.logits(&hidden).unwrap().to_device(&Device::Cpu).unwrap();
        let whole = ours.narrow(0, cut, ids.len() - cut).unwrap();
        let d_split = max_diff(&split, &whole);
        assert!(
            d_split < consistency,
            "{what}: cached prefix read differs by {d_split}"
        );
        let other = &ids[..3];
        let packed = m
            .transformer()
            .forward_packed(&[
                Segment {
                    prefix: None,
                    tokens: other,
                },
                Segment {
                    prefix: Some(&cache),
                    tokens: &ids[cut..],
                },
            ])
            .unwrap();
        let packed = m.logits(&packed.i(1..2).unwrap()).unwrap();
        let packed = packed.to_device(&Device::Cpu).unwrap();
        let d_packed = max_diff(&packed, &whole.i(whole.dim(0).unwrap() - 1..).unwrap());
        assert!(
            d_packed < consistency,
            "{what}: packed read differs by {d_packed}"
        );
        if !setup.device.is_cpu() {
            eprintln!("{what} prompt {k}: cached prefix {d_split:.2e}, packed {d_packed:.2e}");
        }
    }
    worst
}

#[test]
fn qwen2_hf() {
    check("qwen2", Format::Hf);
}

#[test]
fn qwen2_gguf() {
    check("qwen2", Format::Gguf);
}

#[test]
fn qwen3_hf() {
    check("qwen3", Format::Hf);
}

#[test]
fn qwen3_gguf() {
    check("qwen3", Format::Gguf);
}

#[test]
fn llama31_hf() {
    check("llama", Format::Hf);
}

#[test]
fn llama31_gguf() {
    check("llama", Format::Gguf);
}

#[test]
fn mistral_hf() {
    check("mistral", Format::Hf);
}

#[test]
fn mistral_gguf() {
    check("mistral", Format::Gguf);
}

#[test]
fn gemma3_hf() {
    check("gemma3", Format::Hf);
}

#[test]
fn gemma3_gguf() {
    check("gemma3", Format::Gguf);
}

#[test]
fn phi3_hf() {
    check("phi3", Format::Hf);
}

#[test]
fn phi3_gguf() {
    check("phi3", Format::Gguf);
}

/// The fixtures exercise what they claim to: windows shorter than the prompts, sharded and
/// half-precision weights.
#[test]
fn fixtures_cover_their_structure() {
    for family in ["mistral", "gemma3", "phi3"] {
        let exp = expected(family);
        let window = exp["window"].as_u64().unwrap() as usize;
        let longest = exp["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ids"].as_array().unwrap().len())
            .max()
            .unwrap();
        assert!(
            window * 3 < longest,
            "{family}: window {window}, prompts {longest}"
        );
    }
    assert!(fixture("qwen3")
        .join("hf/model.safetensors.index.json")
        .is_file());
}

/// Unsupported architectures are refused by name, with the supported list.
#[test]
fn unsupported_architecture_is_named() {
    let dir = std::env::temp_dir().join(format!("decide-unsupported-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "gpt_neox"}"#).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    let err = Model::load(&dir, &Device::Cpu)
        .err()
        .expect("refused")
        .to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains("gpt_neox") && err.contains("qwen3"), "{err}");
}

/// `.models/<name>` (or under `$DECIDE_MODELS_DIR`), `None` with a note when absent.
fn real_model(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("DECIDE_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.models"))
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: {} not found; run scripts/fetch-model.sh (smol, q05, g270) and, for \
             g270-hf, scripts/make-tiny-models.py g270",
            path.display()
        );
        None
    }
}

/// decide's logits for Gemma 3 270M against transformers' (`g270-hf/expected.json`).
fn check_g270(m: &Model, exp: &Value, what: &str) {
    for p in exp["prompts"].as_array().unwrap() {
        let ids = ids_of(&p["ids"]);
        let text = p["text"].as_str().unwrap();
        assert_eq!(
            m.prompter().tokenize_plain(text).unwrap(),
            ids[1..],
            "{what}: Gemma's tokenizer"
        );
        let rows: Vec<usize> = ids_of(&p["rows"]).iter().map(|&r| r as usize).collect();
        let (hidden, _) = m.forward(&ids, 0, None, &rows).unwrap();
        let ours = m.logits(&hidden).unwrap();
        let cols: Vec<u32> = ids_of(&p["columns"]);
        let picked = ours
            .index_select(&Tensor::new(cols.as_slice(), &Device::Cpu).unwrap(), 1)
            .unwrap();
        let theirs: Vec<Vec<f32>> = serde_json::from_value(p["logits"].clone()).unwrap();
        let d = max_diff(&picked, &Tensor::new(theirs, &Device::Cpu).unwrap());
        let lse: Vec<f32> = serde_json::from_value(p["logsumexp"].clone()).unwrap();
        let ours_lse = ours.exp().unwrap().sum(1).unwrap().log().unwrap();
        let d_lse = max_diff(&ours_lse, &Tensor::new(lse, &Device::Cpu).unwrap());
        eprintln!(
            "g270 {what} ({} tokens): max |logit diff| {d:.2e}, max |logsumexp diff| {d_lse:.2e}",
            ids.len()
        );
        assert!(
            d < REAL_TOLERANCE && d_lse < REAL_TOLERANCE,
            "{what}: {d} {d_lse}"
        );
    }
}

fn g270_expected(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap()
}

/// Gemma 3 270M with its real weights (`.models/g270-hf`, written by
/// `scripts/make-tiny-models.py g270` from g270.gguf dequantized by transformers; 1 GB, so
/// not a fixture): decide's logits against transformers' on a short prompt and at the last
/// 64 positions of one longer than the 512-token sliding window, through Gemma 3's own
/// `tokenizer.json`. Skips when the directory is absent.
#[test]
fn gemma3_270m_real_weights_hf() {
    let Some(dir) = real_model("g270-hf") else {
        return;
    };
    let m = Model::load(&dir, &Device::Cpu).unwrap();
    check_g270(&m, &g270_expected(&dir), "hf");
}

/// g270.gguf itself: its SentencePiece vocabulary through decide gives the ids of the
/// `tokenizer.json` transformers made from it, on awkward text, and its weights (dequantized
/// to f32, as transformers reads them) the same logits as above.
#[test]
fn gemma3_270m_real_weights_gguf() {
    let (Some(gguf), Some(dir)) = (real_model("g270.gguf"), real_model("g270-hf")) else {
        return;
    };
    let options = LoadOptions {
        weights: WeightFormat::F32,
        ..LoadOptions::default()
    };
    let m = Model::load_with(&gguf, &Device::Cpu, &options).unwrap();
    let hf = Prompter::load(&dir).unwrap();
    for text in [
        "Hello world",
        "  two leading spaces,   three inside and a tab\there",
        "line one\nline two\n\n\nafter blank lines\r\n",
        "digits 1234567890 and 3.14159, dates 2026-12-07",
        "unicode: café, naïve, 東京, Привет, emoji 🙂🚀, math ∑∫",
        "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
        "rare bytes \u{1}\u{7f} and \u{10ffff}",
        "    indented code:\n        return x  # comment\n",
    ] {
        assert_eq!(
            m.prompter().tokenize_plain(text).unwrap(),
            hf.tokenize_plain(text).unwrap(),
            "plain {text:?}"
        );
        assert_eq!(
            m.tokenize(text).unwrap(),
            hf.tokenize(text).unwrap(),
            "with control tokens {text:?}"
        );
    }
    check_g270(&m, &g270_expected(&dir), "gguf");
}

/// The tiny fixtures' tolerance holds for the real 18 layers too (measured: 3.1e-5 at most,
/// f32 on CPU, transformers 5.25 in f32).
const REAL_TOLERANCE: f32 = TOLERANCE;

/// decide renders each chat template the project's GGUF files carry to transformers'
/// `apply_chat_template` ids, and labels read at its answer slot.
#[test]
fn chat_templates_match_transformers() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates.json"),
    )
    .unwrap();
    let exp: Value = serde_json::from_str(&text).unwrap();
    for (key, cases) in exp["models"].as_object().unwrap() {
        let Some(path) = real_model(&format!("{key}.gguf")) else {
            continue;
        };
        let p = Prompter::load(&path).unwrap();
        for case in cases.as_array().unwrap() {
            let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
            let prompt = p.render(&msgs).unwrap();
            assert_eq!(
                prompt.tokens,
                ids_of(&case["ids"]),
                "{key}: rendered ids differ from apply_chat_template's\n{}",
                prompt.text
            );
            let labels = vec!["A".to_string(), "B".to_string()];
            assert_eq!(p.label_ids(&prompt, &labels).unwrap().len(), 2);
        }
    }
}

/// q15 as a bf16 Hugging Face directory, written from q15.gguf by `examples/gguf_to_hf.rs`
/// (`.models/q15-hf`; 3.5 GB, so not a fixture), read with AMX bf16 weights as served on CPU
/// (`--weights amx`): the same prompt ids through its `tokenizer.json` and template, and the
/// same logits up to the bf16 rounding of the tensors the GGUF's AMX forward keeps in f32
/// (norms, biases, embedding, output head): logits within [`Q15_HF_TOLERANCE`] at every
/// position and the same top token at the answer slot (elsewhere near-ties may swap: 2 of
/// 160 positions did). With `--amx-exact` those stay f32 (`.models/q15-hf-exact`) and the
/// logits are bit for bit the GGUF's. Skips what is absent (`DECIDE_MODELS_DIR` may point to
/// a directory holding q15.gguf and the two directories), and without AMX.
#[test]
fn q15_hf_directory_reads_as_the_gguf() {
    let Some(gguf) = real_model("q15.gguf") else {
        return;
    };
    if !decide_models::amx::available() {
        eprintln!("skipping: no AMX bf16 on this CPU");
        return;
    }
    let dirs: Vec<(PathBuf, bool)> = [("q15-hf", false), ("q15-hf-exact", true)]
        .into_iter()
        .filter_map(|(name, exact)| real_model(name).map(|d| (d, exact)))
        .collect();
    if dirs.is_empty() {
        return;
    }
    let chats: Vec<Vec<ChatMessage>> = [
        "Is the sky green? A) yes B) no. Answer with the letter.",
        "Which language is this? `fn main() { println!(\"hi\"); }` 1) Python 2) Rust 3) Go. \
         Answer with the number.",
        "Classify the ticket \"my invoice is wrong, café 東京 🙂\": billing, bug or other?",
    ]
    .iter()
    .map(|text| {
        vec![ChatMessage {
            role: "user".into(),
            content: text.to_string(),
        }]
    })
    .collect();
    // One model loaded at a time (AMX weights and an f32 head: ~4.5 GB each).
    let read = |path: &std::path::Path| -> Vec<(Vec<u32>, Tensor)> {
        let options = LoadOptions {
            weights: WeightFormat::AmxBf16,
            ..LoadOptions::default()
        };
        let m = Model::load_with(path, &Device::Cpu, &options).unwrap();
        chats
            .iter()
            .map(|chat| {
                let ids = m.render(chat).unwrap().tokens;
                let logits = all_logits(&m, &ids);
                (ids, logits)
            })
            .collect()
    };
    let reference = read(&gguf);
    let mut failed = Vec::new();
    for (dir, exact) in dirs {
        for ((want_ids, want), (ids, got)) in reference.iter().zip(read(&dir)) {
            assert_eq!(&ids, want_ids, "{}: prompt ids", dir.display());
            let d = max_diff(&got, want);
            let (tops, want_tops) = (
                got.argmax(1).unwrap().to_vec1::<u32>().unwrap(),
                want.argmax(1).unwrap().to_vec1::<u32>().unwrap(),
            );
            let moved = tops.iter().zip(&want_tops).filter(|(a, b)| a != b).count();
            let last_equal = tops.last() == want_tops.last();
            eprintln!(
                "{} ({} tokens): max |logit diff| {d:.3e} (largest |logit| {:.1}); top token \
                 differs at {moved} positions, same at the answer slot: {last_equal}",
                dir.display(),
                ids.len(),
                max_abs(want)
            );
            let ok = if exact {
                d == 0.0
            } else {
                d < Q15_HF_TOLERANCE && last_equal
            };
            if !ok {
                failed.push(format!("{} ({} tokens)", dir.display(), ids.len()));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

/// Largest logit difference between q15.gguf and its bf16 directory under AMX weights
/// (measured: 0.356 on each of the three prompts, largest |logit| ~26).
const Q15_HF_TOLERANCE: f32 = 0.5;
