//! `trap-question` (test only): compile panics (a trap in the host's eyes).
//!
//! It behaves for its own example (so the host's self-test passes and it can be installed) and
//! misbehaves in `compile` for every other question.

use decide_guest_common::questions::misbehaving;

fn misbehave() -> ! {
    panic!("trap-question: deliberate panic in compile")
}

decide_guest_common::question_type_plugin! {
    wit: "../../../wit",
    module: misbehaving,
    name: "trap-question",
    description: "compile panics (a trap in the host's eyes).",
    before_compile: |question: &str| {
        if !misbehaving::is_example(question) {
            misbehave()
        }
    },
}
