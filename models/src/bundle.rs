//! A model bundle: one directory holding
//!
//! * `model.json`: the [`ModelCard`];
//! * `weights.safetensors`: the weights alone, written by the model's plugin;
//! * `checksums.sha256`: the SHA-256 of both, in `sha256sum` format (so
//!   `sha256sum -c checksums.sha256` checks a bundle without tli).
//!
//! [`BundleWriter`] builds a bundle in a hidden staging directory beside
//! its destination and renames it into place once complete: a bundle
//! directory is whole or absent, and an existing directory is never
//! replaced. [`Bundle::open`] checks a bundle by what it opened: each file
//! is opened relative to the opened directory without following links,
//! must be a regular file, and is hashed from that open file; the weights
//! stay open and the plugin reads them through that descriptor
//! ([`Bundle::weights_path`]), so the file checked is the file used.

use crate::card::{ModelCard, FORMAT, FORMAT_VERSION};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tli_core::digest::{sha256, sha256_stream};

pub const CARD_FILE: &str = "model.json";
pub const WEIGHTS_FILE: &str = "weights.safetensors";
pub const CHECKSUMS_FILE: &str = "checksums.sha256";
const SCRATCH_DIR: &str = ".scratch";

/// Largest `model.json` read (its statistics grow with features × assets).
const MAX_CARD_BYTES: u64 = 16 << 20;
/// Largest `checksums.sha256` read.
const MAX_CHECKSUMS_BYTES: u64 = 64 << 10;

/// Why a bundle could not be written or opened. Each message is one line
/// naming the bundle and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} already exists; save the model to a new directory (nothing was written)")]
    Exists { path: PathBuf },
    #[error("{path} is not a model bundle: it has no {file}")]
    Missing { path: PathBuf, file: &'static str },
    #[error("{path}: {file} is not a regular file; a bundle holds only regular files")]
    NotRegular { path: PathBuf, file: String },
    #[error("{path}: {file} is larger than {limit} bytes; it is not a tli model file")]
    TooLarge {
        path: PathBuf,
        file: &'static str,
        limit: u64,
    },
    #[error("{path}: {CHECKSUMS_FILE} {problem}; export the model again")]
    BadChecksums { path: PathBuf, problem: String },
    #[error(
        "{path}: {file} does not match its checksum (expected {expected}, found {found}): the \
         bundle is damaged or was edited; export the model again"
    )]
    ChecksumMismatch {
        path: PathBuf,
        file: &'static str,
        expected: String,
        found: String,
    },
    #[error("{path}: {CARD_FILE} is not a valid model card: {problem}")]
    BadCard { path: PathBuf, problem: String },
    #[error(
        "{path} is a tli model of format {found}, this tli reads format {FORMAT_VERSION}; \
         upgrade tli"
    )]
    NewerFormat { path: PathBuf, found: u32 },
}

impl BundleError {
    /// The same error with the staging directory `from` named as `to` (what
    /// the user knows it by).
    fn at(self, from: &Path, to: &Path) -> Self {
        let rename = |p: PathBuf| if p == from { to.to_path_buf() } else { p };
        match self {
            Self::Io { path, source } => Self::Io {
                path: rename(path),
                source,
            },
            Self::Missing { path, file } => Self::Missing {
                path: rename(path),
                file,
            },
            Self::NotRegular { path, file } => Self::NotRegular {
                path: rename(path),
                file,
            },
            Self::TooLarge { path, file, limit } => Self::TooLarge {
                path: rename(path),
                file,
                limit,
            },
            Self::BadChecksums { path, problem } => Self::BadChecksums {
                path: rename(path),
                problem,
            },
            Self::ChecksumMismatch {
                path,
                file,
                expected,
                found,
            } => Self::ChecksumMismatch {
                path: rename(path),
                file,
                expected,
                found,
            },
            Self::BadCard { path, problem } => Self::BadCard {
                path: rename(path),
                problem,
            },
            Self::NewerFormat { path, found } => Self::NewerFormat {
                path: rename(path),
                found,
            },
            other @ Self::Exists { .. } => other,
        }
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A bundle being written; see the module docs. Dropped unfinished, it
/// removes its staging directory.
pub struct BundleWriter {
    target: PathBuf,
    staging: PathBuf,
    finished: bool,
}

impl BundleWriter {
    /// Starts a bundle that will appear at `dir`, which must not exist.
    pub fn create(dir: &Path) -> Result<Self, BundleError> {
        if dir.symlink_metadata().is_ok() {
            return Err(BundleError::Exists {
                path: dir.to_path_buf(),
            });
        }
        let name = dir
            .file_name()
            .ok_or_else(|| {
                BundleError::io(
                    dir,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "a bundle needs a directory name",
                    ),
                )
            })?
            .to_string_lossy()
            .into_owned();
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let staging = parent.join(format!(
            ".{name}.partial-{}-{}",
            std::process::id(),
            tli_core::ids::now_ms()
        ));
        std::fs::create_dir(&staging).map_err(|e| BundleError::io(&staging, e))?;
        Ok(Self {
            target: dir.to_path_buf(),
            staging,
            finished: false,
        })
    }

    /// Where the plugin writes the weights.
    pub fn weights_path(&self) -> PathBuf {
        self.staging.join(WEIGHTS_FILE)
    }

    /// A scratch directory inside the staging area (for the checkpoint the
    /// weights are exported from), removed before the bundle is finished.
    pub fn scratch_dir(&self) -> Result<PathBuf, BundleError> {
        let dir = self.staging.join(SCRATCH_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| BundleError::io(&dir, e))?;
        Ok(dir)
    }

    /// Writes `model.json` and the checksums, and moves the bundle into place.
    pub fn finish(self, card: &ModelCard) -> Result<PathBuf, BundleError> {
        let json = serde_json::to_vec_pretty(card).map_err(|e| BundleError::BadCard {
            path: self.target.clone(),
            problem: e.to_string(),
        })?;
        self.finish_with_card_bytes(&json)
    }

    /// [`finish`](Self::finish) with `model.json`'s bytes as given (a copy
    /// of a bundle keeps them exactly).
    pub fn finish_with_card_bytes(mut self, card_json: &[u8]) -> Result<PathBuf, BundleError> {
        let scratch = self.staging.join(SCRATCH_DIR);
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch).map_err(|e| BundleError::io(&scratch, e))?;
        }
        let card_path = self.staging.join(CARD_FILE);
        write_synced(&card_path, card_json)?;
        let weights_path = self.weights_path();
        let weights = File::open(&weights_path).map_err(|e| BundleError::io(&weights_path, e))?;
        let (weights_sha, _) =
            sha256_stream(&weights, None).map_err(|e| BundleError::io(&weights_path, e))?;
        weights
            .sync_all()
            .map_err(|e| BundleError::io(&weights_path, e))?;
        let checksums = format!(
            "{}  {CARD_FILE}\n{weights_sha}  {WEIGHTS_FILE}\n",
            sha256(card_json)
        );
        write_synced(&self.staging.join(CHECKSUMS_FILE), checksums.as_bytes())?;
        sync_dir(&self.staging)?;
        rename_no_replace(&self.staging, &self.target)?;
        self.finished = true;
        if let Some(parent) = self.target.parent() {
            if !parent.as_os_str().is_empty() {
                sync_dir(parent)?;
            }
        }
        Ok(self.target.clone())
    }
}

impl BundleWriter {
    /// Finishes a bundle whose three files came from elsewhere (an import):
    /// the weights already written to [`weights_path`](Self::weights_path),
    /// `model.json` and `checksums.sha256` as given. The staging directory
    /// is opened and checked like any bundle ([`Bundle::open`]) before it is
    /// moved into place, so a damaged import never appears.
    pub fn finish_checked(
        mut self,
        card_json: &[u8],
        checksums: &[u8],
    ) -> Result<Bundle, BundleError> {
        write_synced(&self.staging.join(CARD_FILE), card_json)?;
        write_synced(&self.staging.join(CHECKSUMS_FILE), checksums)?;
        let weights_path = self.weights_path();
        File::open(&weights_path)
            .and_then(|f| f.sync_all())
            .map_err(|e| BundleError::io(&weights_path, e))?;
        let mut bundle =
            Bundle::open(&self.staging).map_err(|e| e.at(&self.staging, &self.target))?;
        sync_dir(&self.staging)?;
        rename_no_replace(&self.staging, &self.target)?;
        self.finished = true;
        if let Some(parent) = self.target.parent() {
            if !parent.as_os_str().is_empty() {
                sync_dir(parent)?;
            }
        }
        bundle.dir = self.target.clone();
        Ok(bundle)
    }
}

impl Drop for BundleWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// An opened, checked bundle (see the module docs).
#[derive(Debug)]
pub struct Bundle {
    pub dir: PathBuf,
    pub card: ModelCard,
    /// `model.json` exactly as read (and checked).
    pub card_bytes: Vec<u8>,
    /// `checksums.sha256` exactly as read.
    pub checksums_bytes: Vec<u8>,
    pub weights_sha256: String,
    pub weights_bytes: u64,
    weights: File,
}

impl Bundle {
    /// Opens the bundle in `dir`, checking every file (see the module docs).
    pub fn open(dir: &Path) -> Result<Self, BundleError> {
        let directory = File::open(dir).map_err(|e| BundleError::io(dir, e))?;
        let meta = directory.metadata().map_err(|e| BundleError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(BundleError::Missing {
                path: dir.to_path_buf(),
                file: CARD_FILE,
            });
        }
        let checksums = read_limited(
            &open_child(&directory, dir, CHECKSUMS_FILE)?,
            dir,
            CHECKSUMS_FILE,
            MAX_CHECKSUMS_BYTES,
        )?;
        let expected = parse_checksums(dir, &checksums)?;
        let card_bytes = read_limited(
            &open_child(&directory, dir, CARD_FILE)?,
            dir,
            CARD_FILE,
            MAX_CARD_BYTES,
        )?;
        check_digest(dir, CARD_FILE, &expected, &sha256(&card_bytes))?;
        let weights = open_child(&directory, dir, WEIGHTS_FILE)?;
        let (weights_sha256, weights_bytes) =
            sha256_stream(&weights, None).map_err(|e| BundleError::io(dir, e))?;
        check_digest(dir, WEIGHTS_FILE, &expected, &weights_sha256)?;
        let card = parse_card(dir, &card_bytes)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            card,
            card_bytes,
            checksums_bytes: checksums,
            weights_sha256,
            weights_bytes,
            weights,
        })
    }

    /// A path to the checked weights file that stays valid while this
    /// bundle is open: its open descriptor, so whoever opens it reads the
    /// file that was checked even if the directory changes meanwhile.
    pub fn weights_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.weights.as_raw_fd()))
    }

    /// Copies this bundle to `dir` (which must not exist), byte for byte.
    pub fn copy_to(&self, dir: &Path) -> Result<PathBuf, BundleError> {
        let writer = BundleWriter::create(dir)?;
        let to = writer.weights_path();
        let mut out = File::create(&to).map_err(|e| BundleError::io(&to, e))?;
        let source = self.weights_path();
        let from = File::open(&source).map_err(|e| BundleError::io(&self.dir, e))?;
        let (digest, _) =
            sha256_stream(from, Some(&mut out)).map_err(|e| BundleError::io(&to, e))?;
        if digest != self.weights_sha256 {
            return Err(BundleError::ChecksumMismatch {
                path: self.dir.clone(),
                file: WEIGHTS_FILE,
                expected: self.weights_sha256.clone(),
                found: digest,
            });
        }
        drop(out);
        writer.finish_with_card_bytes(&self.card_bytes)
    }
}

/// Parses and checks `model.json`'s bytes.
pub fn parse_card(dir: &Path, bytes: &[u8]) -> Result<ModelCard, BundleError> {
    let bad = |problem: String| BundleError::BadCard {
        path: dir.to_path_buf(),
        problem,
    };
    // The version first, so a newer format gets "upgrade" rather than a field error.
    let version = serde_json::from_slice::<serde_json::Value>(bytes)
        .map_err(|e| bad(e.to_string()))?
        .get("format_version")
        .and_then(|v| v.as_u64());
    if let Some(found) = version {
        if found > u64::from(FORMAT_VERSION) {
            return Err(BundleError::NewerFormat {
                path: dir.to_path_buf(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let card: ModelCard =
        serde_path_to_error::deserialize(&mut de).map_err(|e| bad(e.to_string()))?;
    if card.format != FORMAT {
        return Err(bad(format!(
            "format is {:?}, expected {FORMAT:?}",
            card.format
        )));
    }
    check_card(&card).map_err(bad)?;
    Ok(card)
}

/// The card's parts agree with each other.
fn check_card(card: &ModelCard) -> Result<(), String> {
    let inputs = &card.inputs;
    if card.assets.is_empty() {
        return Err("it names no asset".into());
    }
    if inputs.feature_roles.len() != inputs.feature_names.len() {
        return Err(format!(
            "{} feature roles for {} features",
            inputs.feature_roles.len(),
            inputs.feature_names.len()
        ));
    }
    if !inputs.feature_variables.is_empty()
        && inputs.feature_variables.len() != inputs.feature_names.len()
    {
        return Err(format!(
            "{} feature variables for {} features",
            inputs.feature_variables.len(),
            inputs.feature_names.len()
        ));
    }
    if inputs.target_horizons.len() != inputs.target_names.len() {
        return Err(format!(
            "{} target horizons for {} targets",
            inputs.target_horizons.len(),
            inputs.target_names.len()
        ));
    }
    let mut indices = std::collections::BTreeSet::new();
    for asset in &card.assets {
        let s = &asset.stats;
        if s.feature_names != inputs.feature_names || s.target_names != inputs.target_names {
            return Err(format!(
                "the statistics of {} are for other features or targets than the inputs",
                asset.symbol
            ));
        }
        if s.target_scales.len() != s.target_names.len()
            || s.feature_mean.len() != s.feature_names.len()
            || s.feature_std.len() != s.feature_names.len()
        {
            return Err(format!(
                "the statistics of {} have the wrong number of values",
                asset.symbol
            ));
        }
        if !indices.insert(asset.asset_index) {
            return Err(format!("asset index {} appears twice", asset.asset_index));
        }
    }
    Ok(())
}

/// `checksums.sha256` → file name → digest; exactly the card and the weights.
fn parse_checksums(dir: &Path, bytes: &[u8]) -> Result<BTreeMap<String, String>, BundleError> {
    let bad = |problem: String| BundleError::BadChecksums {
        path: dir.to_path_buf(),
        problem,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("is not UTF-8".into()))?;
    let mut out = BTreeMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = |what: String| bad(format!("line {}: {what}", i + 1));
        let (digest, name) = line
            .split_once(' ')
            .ok_or_else(|| at("not `<sha256>  <file>`".into()))?;
        let name = name.trim_start_matches([' ', '*']);
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(at("does not start with a SHA-256 in hex".into()));
        }
        if name != CARD_FILE && name != WEIGHTS_FILE {
            return Err(at(format!("names {name:?}, which a bundle does not hold")));
        }
        if out
            .insert(name.to_string(), digest.to_ascii_lowercase())
            .is_some()
        {
            return Err(at(format!("names {name} a second time")));
        }
    }
    for file in [CARD_FILE, WEIGHTS_FILE] {
        if !out.contains_key(file) {
            return Err(bad(format!("has no checksum for {file}")));
        }
    }
    Ok(out)
}

fn check_digest(
    dir: &Path,
    file: &'static str,
    expected: &BTreeMap<String, String>,
    found: &str,
) -> Result<(), BundleError> {
    let want = expected.get(file).map(String::as_str).unwrap_or_default();
    if want != found {
        return Err(BundleError::ChecksumMismatch {
            path: dir.to_path_buf(),
            file,
            expected: want.to_string(),
            found: found.to_string(),
        });
    }
    Ok(())
}

/// Opens `name` in the opened directory, not following a link, and checks
/// that what was opened is a regular file.
fn open_child(directory: &File, dir: &Path, name: &'static str) -> Result<File, BundleError> {
    let c_name =
        CString::new(Path::new(name).as_os_str().as_bytes()).map_err(|_| BundleError::Missing {
            path: dir.to_path_buf(),
            file: name,
        })?;
    // SAFETY: a valid directory descriptor and a NUL-terminated name; the
    // returned descriptor is owned by the File below.
    let fd = unsafe {
        libc::openat(
            directory.as_raw_fd(),
            c_name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) => BundleError::Missing {
                path: dir.to_path_buf(),
                file: name,
            },
            Some(libc::ELOOP) => BundleError::NotRegular {
                path: dir.to_path_buf(),
                file: format!("{name} (a symbolic link)"),
            },
            _ => BundleError::io(&dir.join(name), e),
        });
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().map_err(|e| BundleError::io(dir, e))?;
    if !meta.is_file() {
        return Err(BundleError::NotRegular {
            path: dir.to_path_buf(),
            file: name.to_string(),
        });
    }
    Ok(file)
}

fn read_limited(
    file: &File,
    dir: &Path,
    name: &'static str,
    limit: u64,
) -> Result<Vec<u8>, BundleError> {
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| BundleError::io(&dir.join(name), e))?;
    if bytes.len() as u64 > limit {
        return Err(BundleError::TooLarge {
            path: dir.to_path_buf(),
            file: name,
            limit,
        });
    }
    Ok(bytes)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    let mut file = File::create(path).map_err(|e| BundleError::io(path, e))?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| BundleError::io(path, e))
}

fn sync_dir(dir: &Path) -> Result<(), BundleError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| BundleError::io(dir, e))
}

/// Renames `from` to `to`, failing if `to` exists (never replacing it).
fn rename_no_replace(from: &Path, to: &Path) -> Result<(), BundleError> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| BundleError::io(p, std::io::ErrorKind::InvalidInput.into()))
    };
    let (src, dst) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths relative to the working directory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            src.as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EEXIST) => BundleError::Exists {
                path: to.to_path_buf(),
            },
            _ => BundleError::io(to, e),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
