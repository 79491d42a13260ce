//! `openai-choice`: OpenAI-style choice among typed values (strings or booleans).

decide_guest_common::question_type_plugin! {
    module: openai_choice,
    name: "openai-choice",
    description: "OpenAI-style choice among typed values (strings or booleans).",
}
