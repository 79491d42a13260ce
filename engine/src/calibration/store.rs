//! Saved calibration results: one small JSON file per deployment in the calibration directory,
//! reused only when everything that could change the raw scores or the fit is unchanged.
//!
//! The key holds: the model file's sha256, how the forward computes (device, weight format,
//! kernels), the readout, the policy name and its component's
//! sha256, the render version with the renderer's and question types' sha256, and the question
//! file's sha256. The file is named `<policy>-<first 16 hex of the key's sha256>.json`, and the
//! key is stored inside and compared field by field on load, so a changed component re-fits and a
//! stale file is never reused. The model is hashed by streaming the whole file (sha256 runs at
//! hundreds of MB/s, about a second for a 1 GB model): path, size and mtime would miss a file
//! replaced in place by one of the same size, and the GGUF metadata does not identify a
//! re-quantization.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cv::PolicyReport;

/// What a saved result depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub model_sha256: String,
    /// How the model computes (device, weight format, kernels: [`decide_models::ModelInfo`]'s
    /// `forward`): the same model reads with different rounding on each.
    #[serde(default)]
    pub forward: String,
    pub readout: String,
    pub policy: String,
    pub policy_sha256: String,
    pub render_version: String,
    pub renderer: String,
    pub renderer_sha256: String,
    /// `name=sha256` of each question-type plugin the question file uses, sorted.
    pub question_types: Vec<String>,
    pub questions_sha256: String,
}

impl Key {
    /// sha256 of the key's JSON, hex.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(
            serde_json::to_vec(self).expect("a key serializes"),
        ))
    }

    /// The file this key is saved in under `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        let policy: String = self
            .policy
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        dir.join(format!("{policy}-{}.json", &self.digest()[..16]))
    }
}

/// Counts of the question file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionCounts {
    /// Where the questions came from.
    pub origin: String,
    pub total: usize,
    pub used: usize,
    pub skipped: usize,
    /// Why questions were skipped (the first few, each naming the question).
    pub skipped_reasons: Vec<String>,
}

/// A saved calibration result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    pub key: Key,
    /// When it was measured (UTC, RFC 3339).
    pub date: String,
    pub decide_version: String,
    /// The configured policy and the parameters answers get.
    pub policy: String,
    pub params: Vec<f64>,
    pub temperature: f64,
    /// `calibrated` or `default` (a failed fit).
    pub source: String,
    /// Whether the fitted parameters were kept (the keep rule), else T = 1.0.
    pub kept: bool,
    /// One line on why.
    pub reason: String,
    pub questions: QuestionCounts,
    /// Seconds spent reading the questions and fitting.
    pub seconds: f64,
    /// The configured policy first, then the policies it was compared with.
    pub reports: Vec<PolicyReport>,
    /// The raw scores measured (for audits and offline analysis of other policies).
    #[serde(default)]
    pub samples: Vec<super::cv::Sample>,
}

/// Loads the saved result for `key`, if there is one with exactly this key.
pub fn load(dir: &Path, key: &Key) -> Result<Option<(Saved, PathBuf)>, String> {
    let path = key.path_in(dir);
    let saved: Option<Saved> = read_json(&path, "a saved calibration")?;
    Ok(saved.filter(|s| s.key == *key).map(|s| (s, path)))
}

/// `path` parsed as `T` (`what` names it in the error); none when the file does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
) -> Result<Option<T>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{} is not {what}: {e}", path.display()))
}

/// Saves `saved` under `dir` (written to a temporary name, then renamed into place).
pub fn save(dir: &Path, saved: &Saved) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create {} (setting --calibration-dir): {e}",
            dir.display()
        )
    })?;
    write_json(&saved.key.path_in(dir), saved)
}

/// Writes `value` as pretty JSON to `path` atomically: a temporary name, fsynced, renamed
/// into place (a crash leaves the old file or the new one, never half of one).
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<PathBuf, String> {
    let staged = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let text = serde_json::to_string_pretty(value).expect("a saved result serializes") + "\n";
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(&staged)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", staged.display()))?;
    std::fs::rename(&staged, path)
        .map_err(|e| format!("cannot rename to {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// sha256 of a file, streamed.
///
/// A Hugging Face model directory (`--model DIR`) hashes its regular files in name order, each
/// file's name and then its bytes; a file hashes as it always did, so results saved for GGUF
/// files keep their keys.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    if path.is_dir() {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        files.retain(|p| p.is_file());
        files.sort();
        for f in &files {
            if let Some(name) = f.file_name() {
                hasher.update(name.as_encoded_bytes());
            }
            hash_into(f, &mut hasher)?;
        }
    } else {
        hash_into(path, &mut hasher)?;
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Feeds a file's bytes to `hasher`.
fn hash_into(path: &Path, hasher: &mut Sha256) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buffer[..n]);
    }
}

/// Now as RFC 3339 UTC (`2026-11-29T23:59:59Z`).
pub fn now_rfc3339() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(seconds)
}

/// Seconds since the epoch as RFC 3339 UTC (civil-from-days, proleptic Gregorian).
fn rfc3339(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::ece::Interval;

    fn key() -> Key {
        Key {
            model_sha256: "m".into(),
            forward: "cpu f32".into(),
            readout: "direct".into(),
            policy: "temperature".into(),
            policy_sha256: "p".into(),
            render_version: "direct-options/1".into(),
            renderer: "direct-options".into(),
            renderer_sha256: "r".into(),
            question_types: vec!["systemone-noul=q".into()],
            questions_sha256: "f".into(),
        }
    }

    fn saved(key: Key) -> Saved {
        let interval = Interval {
            value: 0.1,
            low: 0.05,
            high: 0.15,
        };
        Saved {
            key,
            date: now_rfc3339(),
            decide_version: "0".into(),
            policy: "temperature".into(),
            params: vec![1.5],
            temperature: 1.5,
            source: "calibrated".into(),
            kept: true,
            reason: "r".into(),
            questions: QuestionCounts {
                origin: "o".into(),
                total: 60,
                used: 60,
                skipped: 0,
                skipped_reasons: vec![],
            },
            seconds: 1.0,
            reports: vec![PolicyReport {
                policy: "temperature".into(),
                policy_sha256: "p".into(),
                params: Some(vec![1.5]),
                ece_raw: interval,
                ece_calibrated: Some(interval),
                accuracy_raw: 0.5,
                accuracy_calibrated: Some(0.5),
                accuracy_gain: None,
                log_loss_raw: 0.7,
                log_loss_calibrated: Some(0.6),
                keep: true,
                reliability_raw: vec![],
                reliability_calibrated: None,
                error: None,
                rejected_folds: vec![],
            }],
            samples: vec![],
        }
    }

    #[test]
    fn a_saved_result_is_reused_only_with_the_same_key() {
        let dir =
            std::env::temp_dir().join(format!("decide-calibration-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let base = key();
        assert!(load(&dir, &base).unwrap().is_none());
        // One value saved and compared: `saved` stamps the date, which may tick between
        // two calls.
        let original = saved(base.clone());
        let written = save(&dir, &original).unwrap();
        let (loaded, path) = load(&dir, &base).unwrap().unwrap();
        assert_eq!((loaded, path), (original, written));
        let changes: Vec<fn(&mut Key)> = vec![
            |k| k.model_sha256 = "m2".into(),
            |k| k.forward = "cuda bf16 fused".into(),
            |k| k.readout = "two-stage".into(),
            |k| k.policy = "bias-temperature".into(),
            |k| k.policy_sha256 = "p2".into(),
            |k| k.render_version = "direct-options/2".into(),
            |k| k.renderer = "other".into(),
            |k| k.renderer_sha256 = "r2".into(),
            |k| k.question_types = vec!["systemone-noul=q2".into()],
            |k| k.questions_sha256 = "f2".into(),
        ];
        for change in changes {
            let mut changed = base.clone();
            change(&mut changed);
            assert_ne!(changed.digest(), base.digest());
            assert!(
                load(&dir, &changed).unwrap().is_none(),
                "reused despite {changed:?}"
            );
        }
        // A file under the right name whose stored key differs (e.g. a digest collision or a
        // hand edit) is not reused either.
        let mut other = saved(base.clone());
        other.key.questions_sha256 = "edited".into();
        std::fs::write(base.path_in(&dir), serde_json::to_string(&other).unwrap()).unwrap();
        assert!(load(&dir, &base).unwrap().is_none());
        std::fs::write(base.path_in(&dir), "{").unwrap();
        assert!(load(&dir, &base).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_795_910_400), "2026-11-29T00:00:00Z");
    }

    #[test]
    fn files_hash_like_sha256sum() {
        let path = std::env::temp_dir().join(format!("decide-hash-{}", std::process::id()));
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            file_sha256(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let _ = std::fs::remove_file(&path);
    }
}
