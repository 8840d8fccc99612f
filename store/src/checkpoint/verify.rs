//! Checking checkpoints: streamed SHA-256 hashing, the manifest checksum,
//! walking a checkpoint's files, reading the manifest, [`verify`] and
//! [`latest_good`].

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;

use std::path::{Path, PathBuf};
use tli_core::digest::{hex, sha256_stream};

use sha2::{Digest, Sha256};

use super::{
    io_err, parse_step_dir_name, CheckpointError, ChecksumEntry, ChecksumManifest, FORMAT, MANIFEST,
};

/// Streams a file through SHA-256; returns (hex digest, bytes read). With
/// `fsync`, also flushes the file to disk through the same handle.
pub(super) fn hash_file(path: &Path, fsync: bool) -> Result<(String, u64), CheckpointError> {
    let file = File::open(path).map_err(io_err(path, "open"))?;
    let hashed = sha256_stream(&file, None).map_err(io_err(path, "read"))?;
    if fsync {
        file.sync_all().map_err(io_err(path, "fsync"))?;
    }
    Ok(hashed)
}

/// The manifest checksum of a file list (any order).
pub fn manifest_checksum(files: &[ChecksumEntry]) -> String {
    let mut sorted: Vec<&ChecksumEntry> = files.iter().collect();
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
pub(super) struct Tree {
    pub(super) files: Vec<(String, PathBuf)>,
    pub(super) dirs: Vec<PathBuf>,
}

pub(super) fn walk(root: &Path) -> Result<Tree, CheckpointError> {
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
pub fn read_manifest(dir: &Path) -> Result<ChecksumManifest, CheckpointError> {
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
    let mut listed: BTreeMap<&str, &ChecksumEntry> = BTreeMap::new();
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let a = ChecksumEntry {
            path: "a".into(),
            bytes: 1,
            sha256: "00".into(),
        };
        let b = ChecksumEntry {
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
