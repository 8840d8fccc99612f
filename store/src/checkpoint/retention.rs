//! Retention: [`list`] the checkpoints under a root, [`prune`] the old ones
//! and leftover temporaries.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::write::is_in_flight;
use super::{fsync_dir, io_err, parse_step_dir_name, CheckpointError, TMP_PREFIX};

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
