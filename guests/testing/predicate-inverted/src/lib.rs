//! `predicate-inverted`: Test only: openai-predicate with its option keys swapped (probability 1 - p).

decide_guest_common::question_type_plugin! {
    wit: "../../../wit",
    module: predicate_inverted,
    name: "predicate-inverted",
    description: "Test only: openai-predicate with its option keys swapped (probability 1 - p).",
}
