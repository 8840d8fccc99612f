//! Command output on stdout that ends quietly on a closed pipe.
//!
//! `println!` panics when stdout is a pipe whose reader has gone (`tli … |
//! head`): Rust ignores SIGPIPE, so the write fails with `BrokenPipe`. A
//! command line tool should stop quietly then, as coreutils and ripgrep do:
//! [`outln!`](crate::outln) writes through [`write_line`], which exits the
//! process with status 0 on a closed pipe, and with a one-line error and
//! status 1 on any other write failure (a full disk under `> file`).

use std::fmt;
use std::io::{self, Write};

/// Writes one line (the formatted text and `\n`) to stdout; see the module docs.
pub fn write_line(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        exit_on_write_error(&e);
    }
}

/// Writes bytes to stdout as they are; see the module docs.
pub fn write_bytes(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        exit_on_write_error(&e);
    }
}

fn exit_on_write_error(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write the output to stdout: {e}");
    std::process::exit(1);
}

/// `println!` for command output: a closed pipe ends the process quietly
/// (see [`crate::stdout`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdout::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write_line(format_args!($($arg)*))
    };
}
