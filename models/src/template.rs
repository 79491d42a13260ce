//! The chat template: the model's own Jinja template from `tokenizer.chat_template`, rendered
//! with minijinja the way Hugging Face `apply_chat_template` renders it.
//!
//! Why the model's own template: the option-label read is only meaningful at the exact place
//! the model was trained to start an answer, so the prompt must be byte-for-byte what the
//! model saw in training, system prompt defaults included (Qwen inserts its default system
//! message when none is given; that is the template's choice and we keep it).
//!
//! Compatibility with HF: `trim_blocks` and `lstrip_blocks` on, loop controls, Python string
//! methods via `minijinja_contrib::pycompat`, `raise_exception`, `strftime_now`, and the
//! `bos_token` / `eos_token` variables. We pass `add_generation_prompt=true` and
//! `enable_thinking=false` (templates that know it emit a closed, empty think block); if the
//! rendered prompt still ends inside an open `<think>` block we close it, and a prompt that
//! ends where a channelled model (gpt-oss "harmony") picks its output channel gets the final
//! channel opened, so the next token is the answer and not reasoning.

use minijinja::{Environment, Error as JinjaError, ErrorKind};
use serde::Serialize;

use crate::error::{ModelError, Result};

const TEMPLATE_NAME: &str = "chat";

/// What closes an open reasoning block so the answer comes next (Qwen3's non-thinking form).
const THINK_CLOSE: &str = "\n</think>\n\n";

/// A harmony-format assistant turn that has not chosen its channel yet.
const HARMONY_OPEN_TURN: &str = "<|start|>assistant";
/// What puts a harmony assistant turn into its final (answer) channel.
const HARMONY_FINAL: &str = "<|channel|>final<|message|>";
/// A harmony assistant turn left in its reasoning channel.
const HARMONY_ANALYSIS: &str = "<|channel|>analysis<|message|>";

/// A compiled chat template with its BOS/EOS strings.
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'a str,
    content: &'a str,
}

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error at load time, not at the
    /// first request.
    pub fn new(source: &str, bos_token: String, eos_token: String) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function(
            "strftime_now",
            |fmt: String| -> Result<String, JinjaError> { Ok(strftime_now(&fmt)) },
        );
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| {
                ModelError::Template(format!("the model's chat template does not compile: {e:#}"))
            })?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Renders the conversation followed by the assistant's generation prompt.
    #[cfg(test)]
    pub fn render(&self, messages: &[crate::ChatMessage]) -> Result<String> {
        Ok(self.render_marked(messages)?.text)
    }

    /// Renders the conversation and locates each message content in the text.
    ///
    /// The template is rendered twice: with the real contents, and with each non-empty
    /// content replaced by a unique sentinel. Splitting the sentinel rendering at the
    /// sentinels gives the template's own pieces; putting the real contents back in must give
    /// the real rendering byte for byte, and then the content spans are known. A template that
    /// transforms contents (strips them, cuts reasoning out of them, ...) fails that check and
    /// `content` is `None`.
    ///
    /// Whether to close an open `<think>` block is decided on the sentinel rendering, so a
    /// `<think>` inside a message cannot change the end of the prompt.
    pub fn render_marked(&self, messages: &[crate::ChatMessage]) -> Result<Rendered> {
        let mut text = self.render_raw(messages.iter().map(|m| m.content.as_str()), messages)?;
        if messages.iter().all(|m| m.content.is_empty()) {
            close_answer_slot(&mut text);
            return Ok(Rendered {
                text,
                content: Some(Vec::new()),
            });
        }
        // A marker that occurs nowhere in the real rendering or in any content.
        let marker = (0u64..)
            .map(|k| format!("{SENTINEL_OPEN}decide{k}:"))
            .find(|mk| {
                !text.contains(mk.as_str())
                    && !messages.iter().any(|m| m.content.contains(mk.as_str()))
            })
            .expect("some marker is unused");
        let sentinels: Vec<String> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if m.content.is_empty() {
                    String::new()
                } else {
                    format!("{marker}{i}{SENTINEL_CLOSE}")
                }
            })
            .collect();
        let mut marked = self.render_raw(sentinels.iter().map(String::as_str), messages)?;
        let closing = close_answer_slot(&mut marked);
        if let Some(c) = &closing {
            text.push_str(c);
        }
        // Split the sentinel rendering into template pieces and message indices.
        let mut rebuilt = String::with_capacity(text.len());
        let mut spans = Vec::new();
        let mut rest = marked.as_str();
        while let Some(at) = rest.find(marker.as_str()) {
            rebuilt.push_str(&rest[..at]);
            let after = &rest[at + marker.len()..];
            let parsed = after.split_once(SENTINEL_CLOSE).and_then(|(num, tail)| {
                let i: usize = num.parse().ok()?;
                (sentinels.get(i)? == &format!("{marker}{num}{SENTINEL_CLOSE}"))
                    .then_some((i, tail))
            });
            let Some((i, tail)) = parsed else {
                // A mangled sentinel: the template transformed the content.
                return Ok(Rendered {
                    text,
                    content: None,
                });
            };
            let start = rebuilt.len();
            rebuilt.push_str(&messages[i].content);
            spans.push(start..rebuilt.len());
            rest = tail;
        }
        rebuilt.push_str(rest);
        let content = (rebuilt == text).then_some(spans);
        Ok(Rendered { text, content })
    }

    /// The template rendered with `contents[i]` as the content of message `i`.
    fn render_raw<'a>(
        &self,
        contents: impl Iterator<Item = &'a str>,
        messages: &[crate::ChatMessage],
    ) -> Result<String> {
        let msgs: Vec<Msg> = messages
            .iter()
            .zip(contents)
            .map(|(m, content)| Msg {
                role: &m.role,
                content,
            })
            .collect();
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ModelError::Template(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => msgs,
            add_generation_prompt => true,
            enable_thinking => false,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(|e| ModelError::Template(format!("rendering failed: {e:#}")))
    }
}

/// A rendered conversation with the places of the message contents in it.
pub(crate) struct Rendered {
    /// The prompt text.
    pub text: String,
    /// Byte ranges of `text` that are message contents, in order of appearance; `None` when
    /// the template's handling of contents could not be verified (see
    /// [`ChatTemplate::render_marked`]).
    pub content: Option<Vec<std::ops::Range<usize>>>,
}

/// Sentinel delimiters: private-use characters, which no template writes.
const SENTINEL_OPEN: char = '\u{E000}';
const SENTINEL_CLOSE: char = '\u{E001}';

/// Closes what a template leaves open at the answer slot: an open `<think>` block (see
/// [`close_open_think`]), or a harmony assistant turn without a channel or in its analysis
/// channel (the final channel is opened). Returns what was appended.
fn close_answer_slot(text: &mut String) -> Option<String> {
    if let Some(added) = close_open_think(text) {
        return Some(added);
    }
    let add = if text.ends_with(HARMONY_OPEN_TURN) {
        HARMONY_FINAL.to_string()
    } else if text.ends_with(HARMONY_ANALYSIS) {
        format!("<|end|>{HARMONY_OPEN_TURN}{HARMONY_FINAL}")
    } else {
        return None;
    };
    text.push_str(&add);
    Some(add)
}

/// Appends a `</think>` when the text ends inside an open `<think>` block; returns what was
/// appended.
fn close_open_think(text: &mut String) -> Option<String> {
    let open = text.rfind("<think>")?;
    let close = text.rfind("</think>");
    if close.is_some_and(|c| c > open) {
        return None;
    }
    // Qwen3's non-thinking form: "<think>\n\n</think>\n\n".
    let mut add = String::new();
    if !text.ends_with('\n') {
        add.push('\n');
    }
    add.push_str(THINK_CLOSE);
    text.push_str(&add);
    Some(add)
}

/// `strftime_now(fmt)` as in HF templates (used for "Today Date: ..."): current UTC time,
/// common conversions only (%d %m %Y %y %b %B %a %A %H %M %S %j %%); others are left as is.
fn strftime_now(fmt: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format_time(secs, fmt)
}

fn format_time(secs: i64, fmt: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('b') => out.push_str(&MONTHS[m as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[m as usize - 1]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatMessage;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn formats_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(format_time(t, "%d %b %Y"), "29 Feb 2024");
        assert_eq!(
            format_time(t, "%A %B %H:%M:%S %j %y %%"),
            "Thursday February 13:05:09 060 24 %"
        );
        assert_eq!(format_time(0, "%Y-%m-%d %a"), "1970-01-01 Thu");
    }

    #[test]
    fn closes_open_think_block() {
        let mut s = "<|im_start|>assistant\n<think>\n".to_string();
        close_open_think(&mut s);
        assert_eq!(s, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
        let mut s = "x<think>".to_string();
        close_open_think(&mut s);
        assert_eq!(s, "x<think>\n\n</think>\n\n");
        let mut s = "<think>\n\n</think>\n\n".to_string();
        close_open_think(&mut s);
        assert_eq!(s, "<think>\n\n</think>\n\n");
    }

    /// A Qwen3-style template: `enable_thinking=false` writes the closed empty block itself.
    const QWEN3_STYLE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
        {% if add_generation_prompt %}<|im_start|>assistant\n\
        {% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}\
        {% endif %}";

    /// A reasoning-model template (DeepSeek-R1 / QwQ style) whose generation prompt always
    /// opens a think block and has no switch for it.
    const ALWAYS_THINKS: &str =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
        {% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";

    #[test]
    fn answer_slots_of_thinking_templates_are_closed() {
        let q = [msg("user", "Is it red? Reply A or B.")];
        let t = ChatTemplate::new(QWEN3_STYLE, "".into(), "".into()).unwrap();
        let r = t.render_marked(&q).unwrap();
        assert!(
            r.text
                .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            "{:?}",
            r.text
        );
        assert_eq!(r.text.matches("</think>").count(), 1, "closed once");
        let t = ChatTemplate::new(ALWAYS_THINKS, "".into(), "".into()).unwrap();
        let r = t.render_marked(&q).unwrap();
        assert!(
            r.text
                .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            "{:?}",
            r.text
        );
        assert_eq!(
            &r.text[r.content.unwrap()[0].clone()],
            "Is it red? Reply A or B."
        );
    }

    #[test]
    fn harmony_turns_get_the_final_channel() {
        let t = ChatTemplate::new(
            "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}\
             {% if add_generation_prompt %}<|start|>assistant{% endif %}",
            "".into(),
            "".into(),
        )
        .unwrap();
        let r = t.render_marked(&[msg("user", "A or B?")]).unwrap();
        assert!(
            r.text
                .ends_with("<|start|>assistant<|channel|>final<|message|>"),
            "{:?}",
            r.text
        );
        let mut s = "x<|start|>assistant<|channel|>analysis<|message|>".to_string();
        close_answer_slot(&mut s);
        assert!(s.ends_with("<|end|><|start|>assistant<|channel|>final<|message|>"));
        let mut s = "plain".to_string();
        assert_eq!(close_answer_slot(&mut s), None);
    }

    #[test]
    fn marks_content_spans() {
        let src = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>\n{% endfor %}\
                   {% if add_generation_prompt %}<a>{% endif %}";
        let t = ChatTemplate::new(src, "".into(), "".into()).unwrap();
        let msgs = [
            msg("system", "x\u{E000}decide0:0\u{E001}"),
            msg("user", ""),
            msg("user", "<b>"),
        ];
        let r = t.render_marked(&msgs).unwrap();
        assert_eq!(
            r.text,
            "<system>x\u{E000}decide0:0\u{E001}</>\n<user></>\n<user><b></>\n<a>"
        );
        let spans = r.content.unwrap();
        let got: Vec<&str> = spans.iter().map(|s| &r.text[s.clone()]).collect();
        assert_eq!(got, vec![msgs[0].content.as_str(), "<b>"]);
        // A template that transforms contents cannot be verified.
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m.content.strip() }}{% endfor %}",
            "".into(),
            "".into(),
        )
        .unwrap();
        assert!(t
            .render_marked(&[msg("user", " hi")])
            .unwrap()
            .content
            .is_none());
        assert!(t
            .render_marked(&[msg("user", "hi")])
            .unwrap()
            .content
            .is_some());
        // A <think> in a content does not close anything; one from the template does.
        let t = ChatTemplate::new("{{ messages[0].content }}<x>", "".into(), "".into()).unwrap();
        assert_eq!(
            t.render_marked(&[msg("user", "<think>")]).unwrap().text,
            "<think><x>"
        );
        let t =
            ChatTemplate::new("{{ messages[0].content }}<think>", "".into(), "".into()).unwrap();
        let r = t.render_marked(&[msg("user", "q")]).unwrap();
        assert_eq!(r.text, "q<think>\n\n</think>\n\n");
        assert_eq!(r.content.unwrap(), vec![0..1]);
    }

    #[test]
    fn renders_pycompat_and_exceptions() {
        let src =
            "{% for m in messages %}{{ m.role.upper() }}:{{ m.content.strip() }}\n{% endfor %}\
                   {% if add_generation_prompt %}{{ bos_token }}A:{% endif %}";
        let t = ChatTemplate::new(src, "<s>".into(), "</s>".into()).unwrap();
        assert_eq!(t.render(&[msg("user", "  hi ")]).unwrap(), "USER:hi\n<s>A:");
        let t = ChatTemplate::new(
            "{{ raise_exception('no system role') }}",
            "".into(),
            "".into(),
        )
        .unwrap();
        let e = t.render(&[msg("system", "x")]).unwrap_err().to_string();
        assert!(e.contains("no system role"), "{e}");
        assert!(ChatTemplate::new("{% if %}", "".into(), "".into()).is_err());
    }
}
