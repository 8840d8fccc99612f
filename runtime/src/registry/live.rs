//! A running host's registry: the current snapshot, replaced by a larger one
//! when a rescan finds new libraries in the plugin directory.
//!
//! Rules of a rescan:
//! * A file is looked at again only when its identity or contents changed
//!   (device, inode, size, modification time), and loaded only when its
//!   checksum is new: the same library under another name is not loaded twice.
//! * A file found by a rescan is first copied into the host's private
//!   directory, under a name made of its checksum, and loaded from there.
//!   The dynamic loader returns the object it already has for a path it has
//!   seen (even if the file changed), so a new build at an old path needs a
//!   new path; and the copy cannot be rewritten under a running task.
//! * Nothing is unloaded: a running or queued task keeps the version it was
//!   submitted with. A refusal replaces the file's earlier refusal and
//!   changes nothing else.

use super::load::{file_sha256, load_plugin_copy};
use super::{plugin_files, LoadedPlugin, PluginRegistry, RefusedPlugin, RegistryError};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use tli_core::digest::sha256_stream;

/// What identifies a file's version on disk without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSignature {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileSignature {
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// What one rescan did.
#[derive(Debug, Default)]
pub struct RescanReport {
    /// Libraries loaded by this rescan.
    pub loaded: Vec<Arc<LoadedPlugin>>,
    /// Files refused by this rescan, each with its one-line reason.
    pub refused: Vec<RefusedPlugin>,
    /// Plugin files that had nothing new.
    pub unchanged: usize,
    /// Things the operator should know (e.g. a loaded file rewritten in place).
    pub warnings: Vec<String>,
}

pub struct LiveRegistry {
    current: RwLock<Arc<PluginRegistry>>,
    /// Where rescanned libraries are copied before they are loaded.
    copies_dir: PathBuf,
    /// Every file looked at so far, as it was then; also serialises rescans.
    seen: Mutex<HashMap<PathBuf, FileSignature>>,
}

impl LiveRegistry {
    /// Starts from a startup scan. `copies_dir` is emptied: nothing in it is
    /// loaded by this process yet.
    pub fn new(initial: PluginRegistry, copies_dir: PathBuf) -> Self {
        let seen = initial
            .loaded
            .iter()
            .map(|p| p.source.clone())
            .chain(initial.refused.iter().map(|r| r.path.clone()))
            .filter_map(|path| FileSignature::of(&path).ok().map(|s| (path, s)))
            .collect();
        if let Ok(entries) = std::fs::read_dir(&copies_dir) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Self {
            current: RwLock::new(Arc::new(initial)),
            copies_dir,
            seen: Mutex::new(seen),
        }
    }

    /// The registry as of now (a rescan publishes a new one).
    pub fn snapshot(&self) -> Arc<PluginRegistry> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Looks at every plugin file again and loads what is new.
    pub fn rescan(&self) -> Result<RescanReport, RegistryError> {
        self.rescan_where(|_, _| true)
    }

    /// A rescan that considers a changed file only when `ready` says so
    /// (the directory watch waits for a file to stop changing).
    pub fn rescan_where(
        &self,
        mut ready: impl FnMut(&Path, FileSignature) -> bool,
    ) -> Result<RescanReport, RegistryError> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = PluginRegistry::clone(&self.snapshot());
        let mut report = RescanReport::default();
        for path in plugin_files(&next.dir)? {
            let signature = match FileSignature::of(&path) {
                Ok(s) => s,
                // Gone between the listing and now: the next rescan decides.
                Err(_) => continue,
            };
            if seen.get(&path) == Some(&signature) {
                report.unchanged += 1;
                continue;
            }
            if !ready(&path, signature) {
                continue;
            }
            let rewritten = seen
                .get(&path)
                .is_some_and(|old| old.dev == signature.dev && old.ino == signature.ino);
            seen.insert(path.clone(), signature);
            if rewritten && next.loaded.iter().any(|p| p.path == path) {
                report.warnings.push(format!(
                    "{} was rewritten in place while this host has it loaded: tasks running \
                     its earlier build may crash; replace plugin files with mv or install, \
                     never cp",
                    path.display()
                ));
            }
            match self.consider(&mut next, &path) {
                Consideration::Known => report.unchanged += 1,
                Consideration::Loaded(plugin) => {
                    next.refused.retain(|r| r.path != path);
                    tracing::info!(
                        "plugin {} loaded from {} by a rescan",
                        plugin.label(),
                        path.display()
                    );
                    report.loaded.push(plugin);
                }
                Consideration::Refused(reason) => {
                    next.refuse(path.clone(), reason.clone());
                    report.refused.push(RefusedPlugin { path, reason });
                }
            }
        }
        for warning in &report.warnings {
            tracing::warn!("{warning}");
        }
        if !report.loaded.is_empty() || !report.refused.is_empty() {
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        }
        Ok(report)
    }

    /// Copies, checks and loads one changed file.
    fn consider(&self, registry: &mut PluginRegistry, path: &Path) -> Consideration {
        let checksum = match file_sha256(path) {
            Ok(c) => c,
            Err(e) => return Consideration::Refused(format!("cannot be read: {e}")),
        };
        if registry.loaded.iter().any(|p| p.checksum == checksum) {
            return Consideration::Known;
        }
        let copy = match self.private_copy(path, &checksum) {
            Ok(copy) => copy,
            Err(e) => {
                return Consideration::Refused(format!(
                    "cannot be copied into {} before loading: {e}",
                    self.copies_dir.display()
                ))
            }
        };
        let loaded = load_plugin_copy(path, &copy.path, copy.checksum)
            .map_err(|e| e.to_string())
            .and_then(|plugin| registry.admit(plugin));
        if loaded.is_err() {
            // Not loaded: the copy has no use (a loaded one must stay).
            let _ = std::fs::remove_file(&copy.path);
        }
        match loaded {
            Ok(plugin) => Consideration::Loaded(plugin),
            Err(reason) => Consideration::Refused(reason),
        }
    }

    /// Copies `source` to `<copies_dir>/<checksum>-<file name>`, hashing what
    /// it copies (the file may change again while it is read: the copy's own
    /// checksum is what gets loaded and recorded).
    fn private_copy(&self, source: &Path, expected: &str) -> std::io::Result<PrivateCopy> {
        std::fs::create_dir_all(&self.copies_dir)?;
        let file_name = source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let partial = self
            .copies_dir
            .join(format!(".{expected}-{file_name}.partial"));
        let mut to = std::fs::File::create(&partial)?;
        let (checksum, _) = sha256_stream(std::fs::File::open(source)?, Some(&mut to))?;
        to.sync_all()?;
        let path = self
            .copies_dir
            .join(format!("{}-{file_name}", &checksum[..16]));
        std::fs::rename(&partial, &path)?;
        Ok(PrivateCopy { path, checksum })
    }
}

struct PrivateCopy {
    path: PathBuf,
    checksum: String,
}

enum Consideration {
    /// Its contents are already loaded.
    Known,
    Loaded(Arc<LoadedPlugin>),
    Refused(String),
}
