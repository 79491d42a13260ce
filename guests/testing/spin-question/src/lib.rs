//! `spin-question` (test only): compile loops forever (the host's epoch deadline must stop it).
//!
//! It behaves for its own example (so the host's self-test passes and it can be installed) and
//! misbehaves in `compile` for every other question.

use decide_guest_common::questions::misbehaving;

fn misbehave() -> ! {
    let mut i: u64 = 0;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

decide_guest_common::question_type_plugin! {
    wit: "../../../wit",
    module: misbehaving,
    name: "spin-question",
    description: "compile loops forever (the host's epoch deadline must stop it).",
    before_compile: |question: &str| {
        if !misbehaving::is_example(question) {
            misbehave()
        }
    },
}
