//! `--watch-plugins`: a thread that polls the plugin directory and rescans
//! it when a plugin file appears or changes.
//!
//! A file is considered only once it has stopped changing: its signature
//! (inode, size, modification time) must be the same on two polls in a row,
//! so a library still being copied is not refused as truncated halfway
//! through. Polling needs nothing from the platform and sees every kind of
//! change (copy, rename, `install`).

use super::live::{FileSignature, LiveRegistry};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

/// How often the directory is polled by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// Starts the watch; it ends when the registry is dropped.
pub fn spawn(
    registry: Weak<LiveRegistry>,
    poll: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("plugin-watch".into())
        .spawn(move || {
            let mut last_poll: HashMap<PathBuf, FileSignature> = HashMap::new();
            loop {
                std::thread::sleep(poll);
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let mut this_poll = HashMap::new();
                let result = registry.rescan_where(|path, signature| {
                    this_poll.insert(path.to_path_buf(), signature);
                    last_poll.get(path) == Some(&signature)
                });
                last_poll = this_poll;
                // Refusals and loads are logged by the registry, a line each.
                if let Err(e) = result {
                    tracing::warn!("plugin watch: {e}");
                }
            }
        })
}
