//! Process-wide settings of the kernels' launchers, for A/B runs on a GPU: on/off switches and
//! numbers, each read from its environment variable the first time a launch asks, and
//! settable in-process (`kernel_check` runs both ways). Why its own module: every such
//! setting needs the same read-once, overridable state, apart from what the setting does.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// One setting: `var` turns it away from `default` ("0" turns a default-on setting off, "1"
/// turns a default-off one on); [`Switch::set`] overrides both.
pub(crate) struct Switch {
    /// 0: not read yet; 1: on; 2: off.
    state: AtomicU8,
    var: &'static str,
    default: bool,
}

impl Switch {
    pub(crate) const fn new(var: &'static str, default: bool) -> Self {
        Self {
            state: AtomicU8::new(0),
            var,
            default,
        }
    }

    pub(crate) fn set(&self, on: bool) {
        self.state.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    }

    pub(crate) fn on(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let away = if self.default { "0" } else { "1" };
                let on = std::env::var(self.var).map_or(self.default, |v| {
                    if v == away {
                        !self.default
                    } else {
                        self.default
                    }
                });
                self.set(on);
                on
            }
        }
    }
}

/// A number: `var`'s value when it parses, else `default`; [`Number::set`] overrides both.
pub(crate) struct Number {
    /// [`Number::UNREAD`] until read or set.
    value: AtomicUsize,
    var: &'static str,
    default: usize,
}

impl Number {
    const UNREAD: usize = usize::MAX;

    pub(crate) const fn new(var: &'static str, default: usize) -> Self {
        Self {
            value: AtomicUsize::new(Self::UNREAD),
            var,
            default,
        }
    }

    pub(crate) fn set(&self, value: usize) {
        self.value.store(value, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> usize {
        match self.value.load(Ordering::Relaxed) {
            Self::UNREAD => {
                let value = std::env::var(self.var)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(self.default);
                self.set(value);
                value
            }
            value => value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Number, Switch};

    #[test]
    fn reads_its_variable_once_and_set_overrides_it() {
        static ON: Switch = Switch::new("DECIDE_TEST_SWITCH_UNSET_VARIABLE", true);
        static OFF: Switch = Switch::new("DECIDE_TEST_SWITCH_UNSET_VARIABLE", false);
        assert!(ON.on());
        assert!(!OFF.on());
        ON.set(false);
        OFF.set(true);
        assert!(!ON.on());
        assert!(OFF.on());
    }

    #[test]
    fn a_number_reads_its_variable_once_and_set_overrides_it() {
        static N: Number = Number::new("DECIDE_TEST_NUMBER_UNSET_VARIABLE", 7);
        assert_eq!(N.get(), 7);
        N.set(4096);
        assert_eq!(N.get(), 4096);
    }
}
