//! The process's log filter, read and changed at run time through the admin API
//! (`GET/PUT /admin/log`), so that an operator can turn on debug output for one part of a
//! serving gateway without restarting it. tracing's subscriber is global to the process,
//! and so is its filter: the binary that installs the subscriber registers here how to read
//! and change it.

use std::sync::OnceLock;

pub trait LogFilter: Send + Sync {
    /// The directives in force, as `TANDEM_LOG` spells them.
    fn current(&self) -> String;
    /// Replaces the directives; an invalid one changes nothing and says why.
    fn set(&self, directives: &str) -> Result<(), String>;
}

static FILTER: OnceLock<Box<dyn LogFilter>> = OnceLock::new();

/// Registers the process's filter; only the first registration counts.
pub fn register(filter: Box<dyn LogFilter>) -> bool {
    FILTER.set(filter).is_ok()
}

/// The registered filter, if the process installed one.
pub fn filter() -> Option<&'static dyn LogFilter> {
    FILTER.get().map(|f| f.as_ref())
}
