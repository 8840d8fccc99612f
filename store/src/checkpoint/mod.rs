//! Atomic, verifiable checkpoint directories.
//!
//! A plugin trainer writes its checkpoint files into a directory the host
//! gives it; this module makes that atomic and checkable:
//!
//! ```text
//! state_dir/checkpoints/task-<id>/          the root a caller passes in
//!   step-000000001234/                      one checkpoint (12-digit step)
//!     MANIFEST.json                         {"format":1,"step":1234,"files":[…],"checksum":"…"}
//!     model.safetensors, optim/…            whatever the trainer wrote
//!   .tmp-step-1234-<pid>-<n>/               a checkpoint being written
//! ```
//!
//! * [`write_atomic`]: the trainer writes into a fresh temporary directory;
//!   the host hashes every file (SHA-256, streamed), writes `MANIFEST.json`,
//!   fsyncs files and directories, and renames the directory into place. A
//!   crash at any point leaves either the previous state or the complete new
//!   checkpoint (plus a `.tmp-*` leftover that [`prune`] removes).
//! * [`verify`]: every listed file present with the right size and SHA-256,
//!   no unlisted file, and the manifest's own checksum intact.
//! * [`latest_good`]: the newest candidate that verifies, and why the newer
//!   ones were refused (fall back to the previous good checkpoint).
//! * [`list`], [`prune`]: checkpoints newest first; retention.
//! * [`failures`]: the rule for writes that fail (full disk, read-only state).
//!
//! The manifest checksum is SHA-256 over the files sorted by path, each fed
//! as `path`, a NUL byte, the file's SHA-256 in lowercase hex, a newline.

pub mod failures;
mod retention;
mod verify;
mod write;

pub use retention::{list, prune};
pub use verify::{latest_good, manifest_checksum, read_manifest, verify};
pub use write::write_atomic;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The manifest's file name inside a checkpoint directory (reserved: a
/// trainer may not write a file of this name at the top level).
pub const MANIFEST: &str = "MANIFEST.json";
/// The manifest format this host writes and reads.
pub const FORMAT: u32 = 1;
/// Prefix of checkpoint directories: `step-` and the step, 12 digits.
pub const STEP_PREFIX: &str = "step-";
/// Prefix of directories being written or being replaced; [`prune`] removes
/// leftovers.
pub const TMP_PREFIX: &str = ".tmp-";

/// One file of a checkpoint as recorded in its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumEntry {
    /// Path relative to the checkpoint directory, `/`-separated.
    pub path: String,
    pub bytes: u64,
    /// SHA-256 of the contents, lowercase hex.
    pub sha256: String,
}

/// The contents of `MANIFEST.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksumManifest {
    pub format: u32,
    pub step: u64,
    /// Sorted by path.
    pub files: Vec<ChecksumEntry>,
    /// SHA-256 over the sorted (path, sha256) list; see the module docs.
    pub checksum: String,
}

/// A checkpoint that [`write_atomic`] put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedCheckpoint {
    /// `root/step-…`.
    pub dir: PathBuf,
    pub step: u64,
    /// The manifest checksum (what [`verify`] returns).
    pub checksum: String,
    /// Total size of the trainer's files (the manifest not included).
    pub bytes: u64,
}

/// What went wrong writing, checking or pruning checkpoints.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("{}: {op} failed: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "the trainer failed to write its checkpoint for step {step}: {message} \
         (nothing was saved; the previous checkpoint is still the latest)"
    )]
    Writer { step: u64, message: String },
    #[error(
        "{path}: the trainer wrote {what} into its checkpoint directory; checkpoints must hold \
         only regular files and directories (fix the plugin's save_checkpoint)"
    )]
    NotRegularFile { path: String, what: &'static str },
    #[error(
        "{MANIFEST}: the trainer wrote a file with this name, which the host reserves for \
         its manifest (rename the file in the plugin's save_checkpoint)"
    )]
    ReservedName,
    #[error(
        "{path}: file name is not UTF-8; checkpoint file names must be UTF-8 (fix the plugin)"
    )]
    NonUtf8Name { path: PathBuf },
    #[error("{}: checkpoint directory does not exist", dir.display())]
    NoSuchDir { dir: PathBuf },
    #[error("{MANIFEST} missing: half-written checkpoint (use an older one)")]
    ManifestMissing,
    #[error("{MANIFEST}: unreadable: {reason} (corrupt manifest; use an older checkpoint)")]
    ManifestInvalid { reason: String },
    #[error(
        "{MANIFEST}: checksum mismatch: the file list was edited or corrupted \
         (use an older checkpoint)"
    )]
    ChecksumMismatch,
    #[error("{file}: missing (listed in {MANIFEST}; use an older checkpoint)")]
    FileMissing { file: String },
    #[error(
        "{file}: size mismatch: {MANIFEST} says {expected} bytes, the file has {actual} \
         (truncated or overwritten; use an older checkpoint)"
    )]
    SizeMismatch {
        file: String,
        expected: u64,
        actual: u64,
    },
    #[error("{file}: sha256 mismatch (file changed or corrupt; use an older checkpoint)")]
    HashMismatch { file: String },
    #[error(
        "{file}: not listed in {MANIFEST} (added after the checkpoint was written; \
         remove it or use an older checkpoint)"
    )]
    Unlisted { file: String },
    #[error("prune: keep must be at least 1 (the newest checkpoint is always kept)")]
    KeepZero,
}

impl CheckpointError {
    /// The write failed because the process or the system was out of file
    /// descriptors (EMFILE, ENFILE): a moment's shortage, worth another try.
    pub fn is_descriptor_shortage(&self) -> bool {
        match self {
            Self::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
            }
            // A plugin's message crosses the ABI as text: its io::Error's Display.
            Self::Writer { message, .. } => {
                message.contains("(os error 24)") || message.contains("(os error 23)")
            }
            _ => false,
        }
    }
}

fn io_err(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    move |source| CheckpointError::Io { path, op, source }
}

/// `step-000000001234`.
pub fn step_dir_name(step: u64) -> String {
    format!("{STEP_PREFIX}{step:012}")
}

/// `root/step-000000001234`.
pub fn step_dir(root: &Path, step: u64) -> PathBuf {
    root.join(step_dir_name(step))
}

/// The step of a `step-<digits>` directory name.
pub fn parse_step_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(STEP_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn fsync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names_round_trip() {
        assert_eq!(step_dir_name(1234), "step-000000001234");
        assert_eq!(parse_step_dir_name("step-000000001234"), Some(1234));
        assert_eq!(parse_step_dir_name("step-"), None);
        assert_eq!(parse_step_dir_name("step-12a"), None);
        assert_eq!(parse_step_dir_name(".tmp-step-1-2-3"), None);
    }
}
