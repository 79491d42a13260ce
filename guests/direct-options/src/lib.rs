//! `direct-options`: the default renderer. A system message sets the task; the user message
//! shows the input, the question and the labelled options, and asks for one label.
//!
//! The text is rendered by `decide_guest_common::render::direct_options` (its unit tests show
//! it exactly).

decide_guest_common::renderer_plugin! {
    function: direct_options,
    name: "direct-options",
    description: "Lists the options with their labels and asks for exactly one label.",
}
