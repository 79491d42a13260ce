//! Token ids of plain text for the supported byte-level BPE pipelines, straight from the
//! text: the pre-tokenizer's splits (its regex, for `smollm` after each numeric character is
//! set apart; [`Splitter`] runs the regex without its lookahead), each split's bytes through
//! GPT-2's byte-to-character map, and the BPE model's ids for each split, remembered per
//! thread by the split's bytes ([`WordIds`]).
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

use regex::Regex;
use tokenizers::{Model, ModelWrapper};

/// GPT-2's pre-tokenizing regex, as tokenizers' ByteLevel pre-tokenizer writes it.
pub(crate) const GPT2_REGEX: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Splits a thread's word cache holds before it starts over (~100 bytes each with the map's
/// own: ~1 MiB per thread). A long input's distinct words are a few thousand.
const WORDS_KEPT: usize = 1 << 13;

/// One pipeline's splitting: the regex's matches and the text between them (tokenizers'
/// `Isolated` behaviour), within pieces that isolate each numeric character first when
/// `digits` (the `smollm` pipeline's `Digits(individual_digits)`).
pub(crate) struct DirectPath {
    splitter: Splitter,
    digits: bool,
    chars: [char; 256],
}

/// A pre-tokenizer regex ending in `\s+(?!\S)|\s+` (GPT-2's and Qwen2's), run without the
/// lookahead: that tail as `\s+`, then a whitespace run that ends before a character and is
/// longer than one character gives its last character back, as `\s+(?!\S)` does when it
/// backtracks one character. The matches are the same as the regex's.
///
/// Why: the lookahead makes fancy-regex run the whole alternation in its backtracking VM,
/// which was ~55% of the direct path's time (`perf`); without it the `regex` crate's automata
/// run it. Why the rule holds: the earlier alternatives are unchanged and tried first, as
/// both engines match leftmost-first; a match of the tail is a whole whitespace run, which
/// `\s+(?!\S)` takes whole at the end of the text, less its last character before a
/// non-space one, and not at all when that leaves nothing (then `\s+` takes the one
/// character). A match is the tail's when it is all whitespace, except that with
/// `newline_alternative` (Qwen2's `\s*[\r\n]+`, tried before the tail) a run holding
/// `\r` or `\n` is that alternative's: the tail never gets such a run there.
struct Splitter {
    regex: Regex,
    newline_alternative: bool,
}

/// The tail [`Splitter`] runs without its lookahead.
const LOOKAHEAD_TAIL: &str = r"\s+(?!\S)|\s+";

impl Splitter {
    fn new(pattern: &str) -> Option<Self> {
        let head = pattern.strip_suffix(LOOKAHEAD_TAIL)?;
        Some(Self {
            regex: Regex::new(&format!(r"{head}\s+")).ok()?,
            newline_alternative: head.contains(r"|\s*[\r\n]+|"),
        })
    }

    /// `(start, end)` of each match in `text`, in order.
    fn matches<'t>(&'t self, text: &'t str) -> impl Iterator<Item = (usize, usize)> + 't {
        let mut at = 0;
        std::iter::from_fn(move || {
            if at > text.len() {
                return None;
            }
            let m = self.regex.find_at(text, at)?;
            let (start, mut end) = (m.start(), m.end());
            let s = m.as_str();
            let tail = s.chars().all(char::is_whitespace)
                && !(self.newline_alternative && s.contains(['\r', '\n']));
            if tail && end < text.len() {
                let last = s.chars().next_back().map_or(0, char::len_utf8);
                if s.len() > last {
                    end -= last;
                }
            }
            // (No alternative matches empty text; were one to, the search moves on.)
            at = if end > start {
                end
            } else {
                end + text[end..].chars().next().map_or(1, char::len_utf8)
            };
            Some((start, end))
        })
    }
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
            splitter: Splitter::new(regex)?,
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
            for (start, end) in self.splitter.matches(piece) {
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
