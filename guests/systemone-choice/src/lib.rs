//! `systemone-choice`: SystemOne choice among labels with descriptions.

decide_guest_common::question_type_plugin! {
    module: systemone_choice,
    name: "systemone-choice",
    description: "SystemOne choice among labels with descriptions.",
}
