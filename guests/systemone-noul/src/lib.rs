//! `systemone-noul`: SystemOne noul: yes/no with optional outcome descriptions.

decide_guest_common::question_type_plugin! {
    module: noul,
    name: "systemone-noul",
    description: "SystemOne noul: yes/no with optional outcome descriptions.",
}
