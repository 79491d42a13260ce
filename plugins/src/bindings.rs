//! Host bindings of the WIT contract (`wit/plugin.wit`), one module per world.
//!
//! `decide:plugin/types` is generated once (in `question_type`) and shared by the other
//! worlds through `with`, so a `CompiledQuestion` from a question type can be handed to a
//! renderer without conversion between identical generated types.

/// World `question-type-plugin`.
pub mod question_type {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "question-type-plugin",
    });
}

/// World `renderer-plugin`.
pub mod renderer {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "renderer-plugin",
        with: { "decide:plugin/types": super::question_type::decide::plugin::types },
    });
}

/// World `calibration-plugin`.
pub mod calibration {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "calibration-plugin",
        with: { "decide:plugin/types": super::question_type::decide::plugin::types },
    });
}

/// World `contextual-calibration-plugin` (added in 0.1.1): `calibration` plus `content-free`.
/// Only its `content-free` export is called through these bindings (the neutral states, once at
/// load); the `calibration` calls of every policy go through [`calibration`], whose export
/// lookup finds the same interface.
pub mod contextual_calibration {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "contextual-calibration-plugin",
        with: { "decide:plugin/types": super::question_type::decide::plugin::types },
    });
}

pub use question_type::decide::plugin::types;
