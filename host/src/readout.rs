//! The readout planner: which label the model answers with for each option.
//!
//! `direct` gives option i the letter A+i, one token each in every tokenizer we serve. More
//! options than letters need wider label sets (a later readout); until then such a question is
//! refused with a reason instead of being answered wrongly.

/// Most options the direct readout can hold.
pub const DIRECT_CAPACITY: usize = 26;

/// Labels A, B, C, ... for `count` options, or why they do not fit.
pub fn direct_labels(count: usize) -> Result<Vec<String>, String> {
    if count > DIRECT_CAPACITY {
        return Err(format!(
            "{count} options exceed the direct readout's capacity of {DIRECT_CAPACITY} single-letter labels; \
             wider readouts are not available on this server yet"
        ));
    }
    Ok((0..count)
        .map(|i| char::from(b'A' + i as u8).to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_consecutive_letters() {
        assert_eq!(direct_labels(3).unwrap(), ["A", "B", "C"]);
        assert_eq!(direct_labels(26).unwrap().last().unwrap(), "Z");
    }

    #[test]
    fn more_than_26_options_are_refused_with_a_reason() {
        let reason = direct_labels(27).unwrap_err();
        assert!(reason.contains("27 options"), "{reason}");
    }
}
