//! `openai-predicate`: OpenAI-style yes/no predicate; answers the probability of yes.

decide_guest_common::question_type_plugin! {
    module: predicate,
    name: "openai-predicate",
    description: "OpenAI-style yes/no predicate; answers the probability of yes.",
}
