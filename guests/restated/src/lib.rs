//! `restated`: `direct-options`' layout with the question asked again after the options, so the last thing
//! the model reads before answering is the question.
//!
//! The text is rendered by `decide_guest_common::render::restated` (its unit tests show it exactly).

decide_guest_common::renderer_plugin! {
    function: restated,
    name: "restated",
    description: "The direct-options layout with the question asked again after the options, right before the answer.",
}
