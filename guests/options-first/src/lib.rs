//! `options-first`: the labelled options come before the input, so the model reads the input knowing what it
//! decides between (questions over one input then share only the system message as a prefix).
//!
//! The text is rendered by `decide_guest_common::render::options_first` (its unit tests show it exactly).

decide_guest_common::renderer_plugin! {
    function: options_first,
    name: "options-first",
    description: "Lists the labelled options before the input, then asks the question and for exactly one label.",
}
