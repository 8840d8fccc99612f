//! The plugin registry: finds `libtli_plugin_*.so` files in a directory,
//! loads each one that passes every check ([`load`]), and records a one-line
//! reason for each one that does not. One bad file never stops the others or
//! the host.
//!
//! A [`PluginRegistry`] is one immutable snapshot: what a scan loaded and
//! refused. Several versions of one plugin may be loaded side by side
//! (a name and a version identify a library); a plain name means its newest
//! version, `name@version` pins one. A running host keeps its snapshot in a
//! [`LiveRegistry`], which a rescan (on request, or from the directory
//! watch of [`watch`]) replaces with a larger one: libraries are only ever
//! added, never unloaded, so a task keeps the code it started with.

mod live;
mod load;
pub mod watch;

pub use live::{LiveRegistry, RescanReport};
pub use load::{
    load_plugin_as, LoadError, LoadedPlugin, ParsedManifest, PredictorHandle, RefusedPlugin,
    TrainerHandle,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File-name pattern of plugin libraries.
pub const PLUGIN_PREFIX: &str = "libtli_plugin_";
pub const PLUGIN_SUFFIX: &str = ".so";

/// Why a plugin reference (`name` or `name@version`) names nothing loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No version of that name is loaded.
    #[error(
        "no such plugin{}; loaded: {}",
        tli_core::suggest::did_you_mean(suggestion),
        loaded.join(", ")
    )]
    NoSuchPlugin {
        loaded: Vec<String>,
        /// The loaded name closest to the one asked for, when one is close.
        suggestion: Option<String>,
    },
    /// Other versions of it are loaded, not this one.
    #[error("version {version} of plugin {name} is not loaded; loaded: {}", loaded.join(", "))]
    NoSuchVersion {
        name: String,
        version: String,
        loaded: Vec<String>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "plugin directory {dir} cannot be read: {cause}; pass --plugin-dir or set TLI_PLUGIN_DIR"
    )]
    DirUnreadable { dir: PathBuf, cause: std::io::Error },
}

/// What a scan of a plugin directory loaded and refused.
#[derive(Clone)]
pub struct PluginRegistry {
    pub dir: PathBuf,
    /// Every loaded library, in load order (several versions of a name may
    /// be here).
    pub loaded: Vec<Arc<LoadedPlugin>>,
    pub refused: Vec<RefusedPlugin>,
}

impl PluginRegistry {
    /// Loads every `libtli_plugin_*.so` in `dir` in place, in file-name order.
    pub fn scan(dir: &Path) -> Result<Self, RegistryError> {
        let mut registry = Self {
            dir: dir.to_path_buf(),
            loaded: Vec::new(),
            refused: Vec::new(),
        };
        for path in plugin_files(dir)? {
            match load::load_plugin(&path) {
                Ok(plugin) => {
                    if let Err(reason) = registry.admit(plugin) {
                        registry.refuse(path, reason);
                    }
                }
                Err(reason) => registry.refuse(path, reason.to_string()),
            }
        }
        Ok(registry)
    }

    /// Adds a loaded library unless its name and version are already taken
    /// (the reason, when they are).
    fn admit(&mut self, plugin: LoadedPlugin) -> Result<Arc<LoadedPlugin>, String> {
        let name = &plugin.manifest.name;
        if let Some(same) = self.get_version(name, &plugin.manifest.version) {
            return Err(if same.checksum == plugin.checksum {
                format!(
                    "the same library as {}, already loaded",
                    same.source.display()
                )
            } else {
                format!(
                    "{} is already loaded from {}; a different build must carry a higher \
                     version",
                    same.label(),
                    same.source.display()
                )
            });
        }
        tracing::debug!(plugin = %plugin.label(), path = %plugin.path.display(), "plugin loaded");
        let plugin = Arc::new(plugin);
        self.loaded.push(plugin.clone());
        Ok(plugin)
    }

    fn refuse(&mut self, path: PathBuf, reason: String) {
        tracing::warn!("refused plugin {}: {reason}", path.display());
        self.refused.retain(|r| r.path != path);
        self.refused.push(RefusedPlugin { path, reason });
    }

    /// The newest loaded version of `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.loaded
            .iter()
            .filter(|p| p.manifest.name == name)
            .max_by(|a, b| a.version.cmp(&b.version))
    }

    /// One loaded version of `name` (`version` as the manifest spells it).
    pub fn get_version(&self, name: &str, version: &str) -> Option<&Arc<LoadedPlugin>> {
        self.loaded
            .iter()
            .find(|p| p.manifest.name == name && p.manifest.version == version)
    }

    /// The plugin a job names: `name` (its newest version) or `name@version`.
    /// The error says what is loaded instead.
    pub fn resolve(&self, reference: &str) -> Result<&Arc<LoadedPlugin>, ResolveError> {
        let (name, version) = split_plugin_ref(reference);
        let no_such = || ResolveError::NoSuchPlugin {
            loaded: self.names().iter().map(|n| n.to_string()).collect(),
            suggestion: tli_core::suggest::nearest(name, self.names().iter().copied())
                .map(str::to_string),
        };
        match version {
            None => self.get(name).ok_or_else(no_such),
            Some(version) => self.get_version(name, version).ok_or_else(|| {
                let versions = self.versions(name);
                if versions.is_empty() {
                    no_such()
                } else {
                    ResolveError::NoSuchVersion {
                        name: name.to_string(),
                        version: version.to_string(),
                        loaded: versions,
                    }
                }
            }),
        }
    }

    /// The loaded versions of `name`, oldest first.
    pub fn versions(&self, name: &str) -> Vec<String> {
        let mut found: Vec<&Arc<LoadedPlugin>> = self
            .loaded
            .iter()
            .filter(|p| p.manifest.name == name)
            .collect();
        found.sort_by(|a, b| a.version.cmp(&b.version));
        found.iter().map(|p| p.manifest.version.clone()).collect()
    }

    /// The loaded plugin names, each once, in load order.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for p in &self.loaded {
            if !names.contains(&p.manifest.name.as_str()) {
                names.push(&p.manifest.name);
            }
        }
        names
    }
}

/// `"name@version"` → (`name`, `Some(version)`); `"name"` → (`name`, `None`).
pub fn split_plugin_ref(reference: &str) -> (&str, Option<&str>) {
    match reference.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (reference, None),
    }
}

/// The plugin library files in `dir`, in file-name order.
fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|cause| RegistryError::DirUnreadable {
            dir: dir.to_path_buf(),
            cause,
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| is_plugin_file_name(p))
        .collect();
    paths.sort();
    Ok(paths)
}

fn is_plugin_file_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(PLUGIN_PREFIX) && n.ends_with(PLUGIN_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::split_plugin_ref;

    #[test]
    fn a_plugin_reference_may_pin_a_version() {
        assert_eq!(split_plugin_ref("template"), ("template", None));
        assert_eq!(
            split_plugin_ref("template@0.2.0"),
            ("template", Some("0.2.0"))
        );
    }
}
