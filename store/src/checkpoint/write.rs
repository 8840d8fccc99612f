//! Atomic writes: [`write_atomic`] and the in-flight registry of temporary
//! directories that [`prune`](super::prune) must leave alone.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::verify::{hash_file, manifest_checksum, walk};
use super::{
    fsync_dir, io_err, step_dir, CheckpointError, ChecksumEntry, ChecksumManifest, SavedCheckpoint,
    FORMAT, MANIFEST, TMP_PREFIX,
};

/// Temporary directories of writes in progress in this process; [`prune`](super::prune)
/// leaves them alone.
static IN_FLIGHT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn in_flight(update: impl FnOnce(&mut HashSet<PathBuf>)) {
    // A poisoned lock only means another thread panicked while holding it;
    // the set itself is still usable.
    let mut guard = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    update(guard.get_or_insert_with(HashSet::new));
}

pub(super) fn is_in_flight(path: &Path) -> bool {
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
        files.push(ChecksumEntry {
            path: rel.clone(),
            bytes: n,
            sha256,
        });
    }
    let checksum = manifest_checksum(&files);
    let manifest = ChecksumManifest {
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
