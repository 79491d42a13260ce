//! The built-in calibration policies, natively (`guests/common`): `temperature`,
//! `bias-temperature` and `contextual`, `apply` on arbitrary scores and parameters and `fit`
//! on small arbitrary sample sets.
//!
//! Input (binary): byte 0 is the score count k (0 to 16), byte 1 the number of fit samples
//! (0 to 8), then little-endian `f64`s: k scores, the temperature, up to k biases, then the
//! samples' scores, k each (the expected option of a sample from its first score's bits).
//!
//! Asserts, besides no panic: `temperature` and `bias-temperature` apply exactly when the
//! policy's contract says they can (some scores, none NaN or +inf, not all -inf, a finite
//! positive temperature, finite biases); every result of `apply` is one probability per
//! option (per score pair for `contextual`), each in [0, 1], summing to 1; a fit gives a
//! temperature inside the search range, and parameters `apply` accepts for every sample.
#![no_main]

use decide_guest_common::{bias_temperature, contextual, temperature};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [k, samples, rest @ ..] = data else {
        return;
    };
    let (k, samples) = (usize::from(*k % 17), usize::from(*samples % 9));
    let numbers: Vec<f64> = rest
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let mut next = numbers.into_iter();
    let scores: Vec<f64> = next.by_ref().take(k).collect();
    let t = next.next().unwrap_or(1.0);
    let biases: Vec<f64> = next.by_ref().take(k).collect();

    let scorable = !scores.is_empty()
        && scores.iter().all(|s| !s.is_nan() && *s != f64::INFINITY)
        && scores.iter().any(|s| *s != f64::NEG_INFINITY);
    let temperature_ok = t.is_finite() && t > 0.0;

    let applied = temperature::apply(&scores, &[t]);
    assert_eq!(
        applied.is_ok(),
        scorable && temperature_ok,
        "temperature: {applied:?}"
    );
    if let Ok(p) = applied {
        check_probabilities("temperature", &p, scores.len());
    }
    let mut params = vec![t];
    params.extend(&biases);
    let applied = bias_temperature::apply(&scores, &params);
    let biases_ok = biases.iter().all(|b| b.is_finite());
    assert_eq!(
        applied.is_ok(),
        scorable && temperature_ok && biases_ok,
        "bias-temperature: {applied:?}"
    );
    if let Ok(p) = applied {
        check_probabilities("bias-temperature", &p, scores.len());
    }
    if let Ok(p) = contextual::apply(&scores, &[t]) {
        check_probabilities("contextual", &p, scores.len() / 2);
    }

    if k == 0 {
        return;
    }
    let set: Vec<(Vec<f64>, u32)> = (0..samples)
        .map_while(|_| {
            let scores: Vec<f64> = next.by_ref().take(k).collect();
            (scores.len() == k).then(|| {
                let expected = (scores[0].to_bits() % k as u64) as u32;
                (scores, expected)
            })
        })
        .collect();
    if set.is_empty() {
        return;
    }
    let in_range = |t: f64| (temperature::T_MIN..=temperature::T_MAX).contains(&t);
    if let Ok(params) = temperature::fit(&set) {
        assert!(
            params.len() == 1 && in_range(params[0]),
            "temperature fit {params:?}"
        );
        for (scores, _) in &set {
            temperature::apply(scores, &params).expect("a fitted temperature applies");
        }
    }
    if let Ok(params) = bias_temperature::fit(&set) {
        assert!(in_range(params[0]), "bias-temperature fit {params:?}");
        assert_eq!(
            params.len(),
            k + 1,
            "[T, one bias per position]: {params:?}"
        );
        for (scores, _) in &set {
            bias_temperature::apply(scores, &params).expect("fitted parameters apply");
        }
    }
    if k % 2 == 0 {
        if let Ok(params) = contextual::fit(&set) {
            assert!(
                params.len() == 1 && in_range(params[0]),
                "contextual fit {params:?}"
            );
            for (scores, _) in &set {
                if let Err(e) = contextual::apply(scores, &params) {
                    panic!("fitted contextual parameters do not apply to {scores:?}: {e:?}");
                }
            }
        }
    }
});

/// `n` probabilities in [0, 1] summing to 1.
fn check_probabilities(policy: &str, p: &[f64], n: usize) {
    assert_eq!(p.len(), n, "{policy}: {p:?}");
    assert!(
        p.iter().all(|x| (0.0..=1.0).contains(x)),
        "{policy}: not probabilities: {p:?}"
    );
    let sum: f64 = p.iter().sum();
    assert!((sum - 1.0).abs() < 1e-6, "{policy}: sum {sum} of {p:?}");
}
