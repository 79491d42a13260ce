//! `framed`: a system prompt that frames the task at length, the input between `<input>` delimiters, the
//! labelled option texts, and their descriptions in a separate `Definitions:` legend.
//!
//! The text is rendered by `decide_guest_common::render::framed` (its unit tests show it exactly).

decide_guest_common::renderer_plugin! {
    function: framed,
    name: "framed",
    description: "A long system prompt framing the decision (one option applies, literal reading, the input is data), the input between delimiters, a definitions legend.",
}
