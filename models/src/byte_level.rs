//! Token ids of plain text for the supported byte-level BPE pipelines, straight from the
//! text: the pre-tokenizer's splits by the same regex (tokenizers' own `SysRegex`; for
//! `smollm` each numeric character first), each split's bytes through GPT-2's byte-to-
//! character map, and the BPE model's ids for each split, remembered per thread by the
//! split's bytes ([`WordIds`]).
//!
//! Why: on a first read over a long input, tokenizing is most of preparing the prompt (a
//! 28k-token input: ~10 ms on 2 cores), and tokenizers' pipeline spends most of that on what
//! ids do not need: a `NormalizedString` with an alignment per byte for every split, rebuilt
//! by each step, and a `Token` with its own string for every id (`perf`: allocation and
//! those structures ~60%, the regexes ~20%). The splits and ids are the same; tests compare
//! them with `Tokenizer::encode` on awkward and random text, and the tokenizer fuzz target
//! on arbitrary text. Text this path does not cover (text NFC would change, a user-defined
//! added token in it) goes through tokenizers' pipeline ([`crate::tokenizer`]).

use std::collections::HashMap;
use std::sync::Mutex;

use tokenizers::utils::SysRegex;
use tokenizers::{Model, ModelWrapper};

/// GPT-2's pre-tokenizing regex, as tokenizers' ByteLevel pre-tokenizer writes it.
pub(crate) const GPT2_REGEX: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Splits a thread's word cache holds before it starts over (~100 bytes each with the map's
/// own: ~1 MiB per thread). A long input's distinct words are a few thousand.
const WORDS_KEPT: usize = 1 << 13;

/// One pipeline's splitting: `regex`'s matches and the text between them (tokenizers'
/// `Isolated` behaviour), within pieces that isolate each numeric character first when
/// `digits` (the `smollm` pipeline's `Digits(individual_digits)`).
pub(crate) struct DirectPath {
    regex: SysRegex,
    digits: bool,
    chars: [char; 256],
}

/// A split's bytes and its ids.
type Words = HashMap<Box<[u8]>, Box<[u32]>>;

/// The ids of splits seen before on one thread, by their bytes. Shared by every tenant's
/// text, as tokenizers' BPE keeps its own word cache: a split's ids depend on nothing else,
/// unlike the token cache's pieces of whole inputs, which are kept per tenant.
#[derive(Default)]
pub(crate) struct WordIds(Mutex<Words>);

impl DirectPath {
    /// The path for `tokenizer.ggml.pre` = `pre` whose splitting regex is `regex` (`None` for
    /// a pipeline it does not know).
    pub(crate) fn new(pre: &str, regex: &str) -> Option<Self> {
        let digits = match pre {
            "smollm" => true,
            "qwen2" | "gpt2" => false,
            _ => return None,
        };
        Some(Self {
            regex: SysRegex::new(regex).ok()?,
            digits,
            chars: byte_chars(),
        })
    }

    /// The ids of `text` (no added token in it, already normalized) from `model`, each
    /// split's ids looked up in `words` first when given.
    pub(crate) fn encode(
        &self,
        text: &str,
        model: &ModelWrapper,
        words: Option<&WordIds>,
    ) -> tokenizers::Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        let mut kept = words.map(|w| w.0.lock().unwrap_or_else(|e| e.into_inner()));
        let mut word = String::new();
        let mut split = |s: &str| -> tokenizers::Result<()> {
            if let Some(ids) = kept.as_ref().and_then(|k| k.get(s.as_bytes())) {
                out.extend_from_slice(ids);
                return Ok(());
            }
            word.clear();
            word.extend(s.bytes().map(|b| self.chars[b as usize]));
            let start = out.len();
            out.extend(model.tokenize(&word)?.into_iter().map(|t| t.id));
            if let Some(k) = kept.as_mut() {
                if k.len() >= WORDS_KEPT {
                    k.clear();
                }
                k.insert(s.as_bytes().into(), out[start..].into());
            }
            Ok(())
        };
        for piece in digit_pieces(text, self.digits) {
            let mut prev = 0;
            for (start, end) in self.regex.find_iter(piece) {
                if prev != start {
                    split(&piece[prev..start])?;
                }
                split(&piece[start..end])?;
                prev = end;
            }
            if prev != piece.len() {
                split(&piece[prev..])?;
            }
        }
        Ok(out)
    }
}

/// `text` in pieces with each numeric character (`char::is_numeric`) on its own when
/// `digits`, else whole: tokenizers' `Digits(individual_digits)` splitting.
fn digit_pieces(text: &str, digits: bool) -> impl Iterator<Item = &str> {
    let mut rest = if text.is_empty() { None } else { Some(text) };
    std::iter::from_fn(move || {
        let r = rest?;
        if !digits {
            rest = None;
            return Some(r);
        }
        let (at, c) = match r.char_indices().find(|(_, c)| c.is_numeric()) {
            None => {
                rest = None;
                return Some(r);
            }
            Some(found) => found,
        };
        let (piece, tail) = if at == 0 {
            r.split_at(c.len_utf8())
        } else {
            r.split_at(at)
        };
        rest = (!tail.is_empty()).then_some(tail);
        Some(piece)
    })
}

/// GPT-2's byte-to-character map (tokenizers' `bytes_char`): printable bytes stand for
/// themselves, the others for 256 and up, in byte order.
fn byte_chars() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut chars = ['\0'; 256];
    let mut n = 0;
    for b in 0..=255u8 {
        chars[b as usize] = if printable(b) {
            b as char
        } else {
            n += 1;
            char::from_u32(255 + n).expect("256..=323 are chars")
        };
    }
    chars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_stand_alone_and_the_rest_stays_whole() {
        fn cut(t: &str, d: bool) -> Vec<&str> {
            digit_pieces(t, d).collect()
        }
        assert_eq!(cut("ab12c٣d", true), ["ab", "1", "2", "c", "٣", "d"]);
        assert_eq!(cut("12", true), ["1", "2"]);
        assert_eq!(cut("x", true), ["x"]);
        assert_eq!(cut("ab12", false), ["ab12"]);
        assert!(cut("", true).is_empty());
    }

    #[test]
    fn the_byte_map_is_gpt2s() {
        let chars = byte_chars();
        assert_eq!(chars[b'A' as usize], 'A');
        assert_eq!(chars[b' ' as usize], 'Ġ');
        assert_eq!(chars[b'\n' as usize], 'Ċ');
        assert_eq!(chars[0], 'Ā');
        assert_eq!(chars[0xAD], 'Ń');
        let distinct: std::collections::HashSet<char> = chars.into_iter().collect();
        assert_eq!(distinct.len(), 256);
    }
}
