//! `openai-score`: OpenAI-style score over 2 to 10 labelled levels; answers the expected level.

decide_guest_common::question_type_plugin! {
    module: openai_score,
    name: "openai-score",
    description: "OpenAI-style score over 2 to 10 labelled levels; answers the expected level.",
}
