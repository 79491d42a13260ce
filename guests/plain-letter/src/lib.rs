//! `plain-letter`: the prompt a plain user script would send: no system message (the chat template adds its own
//! default), no headings, option descriptions in place of their names.
//!
//! The text is rendered by `decide_guest_common::render::plain_letter` (its unit tests show it exactly).

decide_guest_common::renderer_plugin! {
    function: plain_letter,
    name: "plain-letter",
    description: "No system message, no headings: the input, the question, the options, then 'Answer with the letter of the correct option only.'",
}
