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
//!
//! The manifest checksum is SHA-256 over the files sorted by path, each fed
//! as `path`, a NUL byte, the file's SHA-256 in lowercase hex, a newline.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
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
pub struct ManifestEntry {
    /// Path relative to the checkpoint directory, `/`-separated.
    pub path: String,
    pub bytes: u64,
    /// SHA-256 of the contents, lowercase hex.
    pub sha256: String,
}

/// The contents of `MANIFEST.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub step: u64,
    /// Sorted by path.
    pub files: Vec<ManifestEntry>,
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

/// Temporary directories of writes in progress in this process; [`prune`]
/// leaves them alone.
static IN_FLIGHT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn in_flight(update: impl FnOnce(&mut HashSet<PathBuf>)) {
    // A poisoned lock only means another thread panicked while holding it;
    // the set itself is still usable.
    let mut guard = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    update(guard.get_or_insert_with(HashSet::new));
}

fn is_in_flight(path: &Path) -> bool {
    let mut found = false;
    in_flight(|set| found = set.contains(path));
    found
}

/// Removes a temporary directory when dropped unless disarmed (also on a
/// panic in the trainer's closure).
struct TempDir {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_dir_all(&self.path);
        }
        in_flight(|set| {
            set.remove(&self.path);
        });
    }
}

fn unique_tmp_name(what: &str, step: u64) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{what}-{step}-{}-{n}", std::process::id())
}

fn fsync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

/// Streams a file through SHA-256; returns (hex digest, bytes read). With
/// `fsync`, also flushes the file to disk through the same handle.
fn hash_file(path: &Path, fsync: bool) -> Result<(String, u64), CheckpointError> {
    let mut file = File::open(path).map_err(io_err(path, "open"))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(path, "read")(e)),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    if fsync {
        file.sync_all().map_err(io_err(path, "fsync"))?;
    }
    Ok((hex(&hasher.finalize()), total))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The manifest checksum of a file list (any order).
pub fn manifest_checksum(files: &[ManifestEntry]) -> String {
    let mut sorted: Vec<&ManifestEntry> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut hasher = Sha256::new();
    for f in sorted {
        hasher.update(f.path.as_bytes());
        hasher.update([0u8]);
        hasher.update(f.sha256.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

/// Everything under a directory: files as (relative `/` path, absolute path)
/// sorted by relative path, and every directory (deepest first).
struct Tree {
    files: Vec<(String, PathBuf)>,
    dirs: Vec<PathBuf>,
}

fn walk(root: &Path) -> Result<Tree, CheckpointError> {
    let mut tree = Tree {
        files: Vec::new(),
        dirs: Vec::new(),
    };
    walk_into(root, "", &mut tree)?;
    tree.files.sort_by(|a, b| a.0.cmp(&b.0));
    tree.dirs.push(root.to_path_buf());
    Ok(tree)
}

fn walk_into(dir: &Path, prefix: &str, tree: &mut Tree) -> Result<(), CheckpointError> {
    let entries = fs::read_dir(dir).map_err(io_err(dir, "read directory"))?;
    for entry in entries {
        let entry = entry.map_err(io_err(dir, "read directory"))?;
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| CheckpointError::NonUtf8Name { path: path.clone() })?;
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry.file_type().map_err(io_err(&path, "read file type"))?;
        if kind.is_dir() {
            walk_into(&path, &rel, tree)?;
            tree.dirs.push(path);
        } else if kind.is_file() {
            tree.files.push((rel, path));
        } else {
            let what = if kind.is_symlink() {
                "a symbolic link"
            } else {
                "a special file"
            };
            return Err(CheckpointError::NotRegularFile { path: rel, what });
        }
    }
    Ok(())
}

/// Writes a checkpoint atomically: `write` fills a fresh temporary directory
/// under `root` (created if needed); then every file is hashed and fsynced,
/// `MANIFEST.json` written and fsynced, and the directory renamed to
/// `root/step-<12 digits>`. An existing checkpoint of the same step (a
/// re-save after resume) is replaced: moved aside first, removed after the
/// new one is in place. On any error the temporary directory is removed and
/// nothing changes under `root`.
pub fn write_atomic<E: std::fmt::Display>(
    root: &Path,
    step: u64,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<SavedCheckpoint, CheckpointError> {
    let root_existed = root.is_dir();
    fs::create_dir_all(root).map_err(io_err(root, "create checkpoint root"))?;
    if !root_existed {
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
    }

    let tmp_path = root.join(unique_tmp_name("step", step));
    fs::create_dir(&tmp_path).map_err(io_err(&tmp_path, "create temporary directory"))?;
    in_flight(|set| {
        set.insert(tmp_path.clone());
    });
    let mut tmp = TempDir {
        path: tmp_path,
        armed: true,
    };

    write(&tmp.path).map_err(|e| CheckpointError::Writer {
        step,
        message: e.to_string(),
    })?;

    let tree = walk(&tmp.path)?;
    if tree.files.iter().any(|(rel, _)| rel == MANIFEST) {
        return Err(CheckpointError::ReservedName);
    }
    let mut files = Vec::with_capacity(tree.files.len());
    let mut bytes = 0u64;
    for (rel, abs) in &tree.files {
        let (sha256, n) = hash_file(abs, true)?;
        bytes += n;
        files.push(ManifestEntry {
            path: rel.clone(),
            bytes: n,
            sha256,
        });
    }
    let checksum = manifest_checksum(&files);
    let manifest = Manifest {
        format: FORMAT,
        step,
        files,
        checksum: checksum.clone(),
    };
    let manifest_path = tmp.path.join(MANIFEST);
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| CheckpointError::Io {
        path: manifest_path.clone(),
        op: "serialize manifest",
        source: io::Error::other(e),
    })?;
    {
        let mut f = File::create(&manifest_path).map_err(io_err(&manifest_path, "create"))?;
        f.write_all(&json)
            .map_err(io_err(&manifest_path, "write"))?;
        f.sync_all().map_err(io_err(&manifest_path, "fsync"))?;
    }
    for dir in &tree.dirs {
        fsync_dir(dir)?;
    }

    let dest = step_dir(root, step);
    let aside = if dest.exists() {
        let aside = root.join(unique_tmp_name("old-step", step));
        fs::rename(&dest, &aside).map_err(io_err(&dest, "move the previous checkpoint aside"))?;
        Some(aside)
    } else {
        None
    };
    if let Err(e) = fs::rename(&tmp.path, &dest) {
        if let Some(aside) = &aside {
            // Put the previous checkpoint back; if that fails too it stays
            // under its .tmp-old-step name until prune.
            let _ = fs::rename(aside, &dest);
        }
        return Err(io_err(&tmp.path, "rename into place")(e));
    }
    tmp.armed = false;
    fsync_dir(root)?;
    if let Some(aside) = aside {
        fs::remove_dir_all(&aside).map_err(io_err(&aside, "remove the replaced checkpoint"))?;
    }
    Ok(SavedCheckpoint {
        dir: dest,
        step,
        checksum,
        bytes,
    })
}

/// Checks that a manifest path is a plain relative path inside the
/// checkpoint directory.
fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && path
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Reads and parses `dir/MANIFEST.json`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, CheckpointError> {
    if !dir.is_dir() {
        return Err(CheckpointError::NoSuchDir {
            dir: dir.to_path_buf(),
        });
    }
    let path = dir.join(MANIFEST);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::ManifestMissing)
        }
        Err(e) => return Err(io_err(&path, "read")(e)),
    };
    serde_json::from_slice(&text).map_err(|e| CheckpointError::ManifestInvalid {
        reason: e.to_string(),
    })
}

/// Verifies a checkpoint directory against its manifest and returns the
/// manifest checksum. Checks, in order: the manifest is present, parses, has
/// format 1, its step matches the directory name, its paths are plain and
/// unique, and its checksum matches its file list; then every listed file
/// exists with the listed size and SHA-256; then no file is unlisted.
pub fn verify(dir: &Path) -> Result<String, CheckpointError> {
    let manifest = read_manifest(dir)?;
    if manifest.format != FORMAT {
        return Err(CheckpointError::ManifestInvalid {
            reason: format!(
                "format {} is not supported by this host (it reads format {FORMAT}); \
                 use the tli version that wrote it",
                manifest.format
            ),
        });
    }
    let dir_step = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_step_dir_name);
    if let Some(dir_step) = dir_step {
        if dir_step != manifest.step {
            return Err(CheckpointError::ManifestInvalid {
                reason: format!(
                    "it is for step {} but the directory is for step {dir_step}",
                    manifest.step
                ),
            });
        }
    }
    let mut listed: BTreeMap<&str, &ManifestEntry> = BTreeMap::new();
    for entry in &manifest.files {
        if !safe_relative(&entry.path) || entry.path == MANIFEST {
            return Err(CheckpointError::ManifestInvalid {
                reason: format!("file path {:?} is not a plain relative path", entry.path),
            });
        }
        if listed.insert(entry.path.as_str(), entry).is_some() {
            return Err(CheckpointError::ManifestInvalid {
                reason: format!("file {:?} is listed twice", entry.path),
            });
        }
    }
    if manifest_checksum(&manifest.files) != manifest.checksum {
        return Err(CheckpointError::ChecksumMismatch);
    }
    for entry in listed.values() {
        let path = dir.join(&entry.path);
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(CheckpointError::FileMissing {
                    file: entry.path.clone(),
                })
            }
            Err(e) => return Err(io_err(&path, "stat")(e)),
        };
        if !meta.is_file() {
            return Err(CheckpointError::FileMissing {
                file: entry.path.clone(),
            });
        }
        if meta.len() != entry.bytes {
            return Err(CheckpointError::SizeMismatch {
                file: entry.path.clone(),
                expected: entry.bytes,
                actual: meta.len(),
            });
        }
        let (sha256, n) = hash_file(&path, false)?;
        if n != entry.bytes {
            return Err(CheckpointError::SizeMismatch {
                file: entry.path.clone(),
                expected: entry.bytes,
                actual: n,
            });
        }
        if sha256 != entry.sha256 {
            return Err(CheckpointError::HashMismatch {
                file: entry.path.clone(),
            });
        }
    }
    let tree = walk(dir)?;
    if let Some((rel, _)) = tree
        .files
        .iter()
        .find(|(rel, _)| rel != MANIFEST && !listed.contains_key(rel.as_str()))
    {
        return Err(CheckpointError::Unlisted { file: rel.clone() });
    }
    Ok(manifest.checksum)
}

/// The first of `candidates` (newest first) that verifies, and the newer
/// ones that did not, each with its reason (for the caller to log).
pub fn latest_good<'a>(
    candidates: impl IntoIterator<Item = &'a Path>,
) -> (Option<PathBuf>, Vec<(PathBuf, CheckpointError)>) {
    let mut refused = Vec::new();
    for dir in candidates {
        match verify(dir) {
            Ok(_) => return (Some(dir.to_path_buf()), refused),
            Err(e) => refused.push((dir.to_path_buf(), e)),
        }
    }
    (None, refused)
}

/// The `step-*` directories under `root`, newest (highest step) first. A
/// missing root has none.
pub fn list(root: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(root, "read directory")(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(root, "read directory"))?;
        let Some(step) = entry.file_name().to_str().and_then(parse_step_dir_name) else {
            continue;
        };
        let path = entry.path();
        if entry
            .file_type()
            .map_err(io_err(&path, "read file type"))?
            .is_dir()
        {
            out.push((step, path));
        }
    }
    out.sort_by_key(|(step, _)| std::cmp::Reverse(*step));
    Ok(out)
}

/// Keeps the `keep` newest checkpoints under `root`, removes the older ones
/// and any leftover `.tmp-*` entries (except writes in progress in this
/// process), and returns what was removed. `keep` must be at least 1. Not
/// for use while another process writes checkpoints under the same root.
pub fn prune(root: &Path, keep: usize) -> Result<Vec<PathBuf>, CheckpointError> {
    if keep == 0 {
        return Err(CheckpointError::KeepZero);
    }
    let mut removed = Vec::new();
    for (_, dir) in list(root)?.into_iter().skip(keep) {
        fs::remove_dir_all(&dir).map_err(io_err(&dir, "remove old checkpoint"))?;
        removed.push(dir);
    }
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(io_err(root, "read directory")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err(root, "read directory"))?;
        let is_tmp = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(TMP_PREFIX));
        let path = entry.path();
        if !is_tmp || is_in_flight(&path) {
            continue;
        }
        let kind = entry.file_type().map_err(io_err(&path, "read file type"))?;
        if kind.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        }
        .map_err(io_err(&path, "remove leftover temporary"))?;
        removed.push(path);
    }
    if !removed.is_empty() {
        fsync_dir(root)?;
    }
    Ok(removed)
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

    #[test]
    fn manifest_paths_must_stay_inside() {
        assert!(safe_relative("a/b.bin"));
        assert!(!safe_relative("../x"));
        assert!(!safe_relative("/etc/passwd"));
        assert!(!safe_relative("a/./b"));
        assert!(!safe_relative(""));
    }

    #[test]
    fn checksum_ignores_order() {
        let a = ManifestEntry {
            path: "a".into(),
            bytes: 1,
            sha256: "00".into(),
        };
        let b = ManifestEntry {
            path: "b".into(),
            bytes: 2,
            sha256: "11".into(),
        };
        assert_eq!(
            manifest_checksum(&[a.clone(), b.clone()]),
            manifest_checksum(&[b, a])
        );
    }
}
