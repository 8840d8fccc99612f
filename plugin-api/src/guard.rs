//! Panic containment at the ABI boundary.
//!
//! abi_stable's `extern "C"` shims abort the whole process when a panic
//! unwinds through them, which would take every other training task down with
//! it. Every entry point therefore runs inside [`guarded`], which catches the
//! unwind and turns it into a [`PluginError`] with code `PANIC` carrying the
//! panic message and source location.

use crate::types::{ErrorCode, PluginError};
use abi_stable::std_types::RResult;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Depth of guarded calls on this thread (a guarded call may nest).
    static GUARD_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Message and location of the last panic caught on this thread.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once per plugin library: each cdylib has its own std) a panic
/// hook that records the message and location of panics inside guarded calls
/// instead of printing them; panics elsewhere go to the previous hook.
pub(crate) fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARD_DEPTH.with(|d| d.get()) == 0 {
                previous(info);
                return;
            }
            let message = payload_message(info.payload());
            let text = match info.location() {
                Some(loc) => format!("{message} (at {}:{})", loc.file(), loc.line()),
                None => message,
            };
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(text));
        }));
    });
}

fn payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, converting both its error and any panic into an `RErr`.
pub fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, PluginError>,
) -> RResult<T, PluginError> {
    GUARD_DEPTH.with(|d| d.set(d.get() + 1));
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    GUARD_DEPTH.with(|d| d.set(d.get() - 1));
    match outcome {
        Ok(Ok(value)) => RResult::ROk(value),
        Ok(Err(error)) => RResult::RErr(error),
        Err(payload) => {
            let detail = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| payload_message(payload.as_ref()));
            RResult::RErr(PluginError::new(
                ErrorCode::PANIC,
                format!("plugin panicked in {what}: {detail}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_error_with_message() {
        install_panic_hook();
        let r: RResult<(), _> = guarded("step", || panic!("boom {}", 7));
        let e = r.unwrap_err();
        assert_eq!(e.code, ErrorCode::PANIC);
        assert!(e.message.contains("boom 7"), "{}", e.message);
        assert!(e.message.contains("in step"), "{}", e.message);
        assert!(e.message.contains("guard.rs"), "{}", e.message);
    }

    #[test]
    fn errors_and_values_pass_through() {
        let ok: RResult<u32, PluginError> = guarded("x", || Ok(3));
        assert_eq!(ok.unwrap(), 3);
        let err: RResult<u32, _> = guarded("x", || Err(PluginError::invalid_config("bad lr")));
        assert_eq!(err.unwrap_err().code, ErrorCode::INVALID_CONFIG);
    }
}
