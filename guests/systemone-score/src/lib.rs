//! `systemone-score`: SystemOne score over 2 to 10 criteria; answers the expected level.

decide_guest_common::question_type_plugin! {
    module: systemone_score,
    name: "systemone-score",
    description: "SystemOne score over 2 to 10 criteria; answers the expected level.",
}
