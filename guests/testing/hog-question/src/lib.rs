//! `hog-question` (test only): compile allocates until it exceeds the host's memory cap.
//!
//! It behaves for its own example (so the host's self-test passes and it can be installed) and
//! misbehaves in `compile` for every other question.

use decide_guest_common::questions::misbehaving;

fn misbehave() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        block[4096] = 1;
        hoard.push(std::hint::black_box(block));
    }
}

decide_guest_common::question_type_plugin! {
    wit: "../../../wit",
    module: misbehaving,
    name: "hog-question",
    description: "compile allocates until it exceeds the host's memory cap.",
    before_compile: |question: &str| {
        if !misbehaving::is_example(question) {
            misbehave()
        }
    },
}
