//! Shared by the bench binaries: where cargo put the built artifacts.

use std::path::{Path, PathBuf};

/// `target/<profile>`, from this executable's path (`target/<profile>/deps/<bench>-<hash>`),
/// where `cargo build --release --workspace` leaves `tli` and the plugin libraries.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}
