//! `temperature-v010` (test only): the `temperature` guest built against the frozen 0.1.0
//! contract (`wit/compat/0.1.0`), so it exports `decide:plugin/calibration@0.1.0`. The host,
//! linking 0.1.1, must still load it (its export is found under the semver-compatible name) and
//! call it.

decide_guest_common::calibration_plugin! {
    wit: "../../../wit/compat/0.1.0",
    module: temperature,
    name: "temperature-v010",
    description: "Test only: softmax(scores / T) built against decide:plugin@0.1.0.",
}
