//! Which bar files (and covariate files) a job may name: the host's data roots. A client allowed
//! to submit jobs must not make the host open any file the host can read
//! (`/etc/shadow` as a "CSV", another user's keys): every asset path is
//! resolved (symlinks and `..` included) and must lie under one of the roots.
//!
//! The roots are `--data-root DIR` (repeatable; `/` allows everything), or
//! by default the host's working directory and the bundled sample data.
//! Refusals name the path as given and the roots, never anything read from
//! the file (nothing is read before the check passes); a path that does not
//! resolve gets the same refusal when where it would be is outside the
//! roots (its existing part resolved, symlinked directories included), so
//! the answer does not tell whether a file exists out there.
//!
//! This check answers a submission at once with a clear refusal; the
//! guarantee is kept where files are opened: a host confines its process's
//! data reads to the same roots (`tli_data::files::confine_to`), checking
//! each file by what was opened, so a link that changes after this check
//! still leads nowhere outside.

use crate::job::AssetSpec;
use std::path::{Component, Path, PathBuf};

/// Why an asset path is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataRootError {
    #[error(
        "{path}: outside the host's data roots ({roots}); the host reads bar files only under \
         them (start it with --data-root DIR to allow another directory)"
    )]
    Outside { path: String, roots: String },
    #[error("{path}: cannot be read ({reason})")]
    Unreadable { path: String, reason: String },
}

/// The directories bar files must be under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataRoots {
    /// Canonical (symlink-free, absolute) directories.
    roots: Vec<PathBuf>,
}

impl DataRoots {
    /// Roots from directories; each is resolved now (one that does not
    /// exist is an error: a typo would otherwise refuse every file).
    pub fn new(dirs: &[PathBuf]) -> Result<Self, DataRootError> {
        let mut roots = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let canonical = dir.canonicalize().map_err(|e| DataRootError::Unreadable {
                path: dir.display().to_string(),
                reason: e.to_string(),
            })?;
            if !roots.contains(&canonical) {
                roots.push(canonical);
            }
        }
        Ok(Self { roots })
    }

    /// The default roots: the working directory, and the bundled samples
    /// (`data/samples` of the checkout the binary was built in, or
    /// `share/tli/samples` of an installation) when they exist.
    pub fn defaults() -> Result<Self, DataRootError> {
        let mut dirs = Vec::new();
        if let Ok(cwd) = std::env::current_dir() {
            dirs.push(cwd);
        }
        if let Some(exe_dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            for candidate in [
                exe_dir.join("../../data/samples"),
                exe_dir.join("../share/tli/samples"),
            ] {
                if candidate.is_dir() {
                    dirs.push(candidate);
                }
            }
        }
        Self::new(&dirs)
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The file `path` names, resolved, if it is under a root.
    pub fn check(&self, path: &Path) -> Result<PathBuf, DataRootError> {
        let outside = || DataRootError::Outside {
            path: path.display().to_string(),
            roots: self.describe(),
        };
        match path.canonicalize() {
            Ok(resolved) if self.contains(&resolved) => Ok(resolved),
            Ok(_) => Err(outside()),
            Err(e) => {
                // Only a path that would be inside learns why it cannot be read.
                // "Would be" is judged on what exists of it: its longest
                // prefix that resolves, resolved as the kernel would (a
                // symlinked directory inside a root that leads out is outside),
                // then the rest.
                let judged = resolve_existing_prefix(path).ok_or_else(outside)?;
                if self.contains(&judged) {
                    Err(DataRootError::Unreadable {
                        path: path.display().to_string(),
                        reason: e.to_string(),
                    })
                } else {
                    Err(outside())
                }
            }
        }
    }

    /// Checks every bar file of a job's assets (synthetic ones need none);
    /// the first refusal with its asset's index.
    pub fn check_assets(&self, assets: &[AssetSpec]) -> Result<(), (usize, DataRootError)> {
        for (i, asset) in assets.iter().enumerate() {
            if let AssetSpec::Data(source) = asset {
                self.check(&source.path).map_err(|e| (i, e))?;
            }
        }
        Ok(())
    }

    /// Checks every covariate file a feature config names; the first
    /// refusal with its column's name.
    pub fn check_features(
        &self,
        features: &tli_data::features::FeatureConfig,
    ) -> Result<(), (String, DataRootError)> {
        for column in &features.columns {
            if let Some(file) = &column.file {
                self.check(file).map_err(|e| (column.name.clone(), e))?;
            }
        }
        Ok(())
    }

    fn contains(&self, resolved: &Path) -> bool {
        self.roots.iter().any(|root| resolved.starts_with(root))
    }

    fn describe(&self) -> String {
        self.roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `path` made absolute, its longest leading part that exists resolved
/// (symbolic links and `..` followed, as the kernel does), and the parts
/// after it appended with `.` and `..` removed: where `path` would be if it
/// existed. `None` when not even `/` resolves.
fn resolve_existing_prefix(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let parts: Vec<Component<'_>> = absolute.components().collect();
    for keep in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..keep].iter().collect();
        if let Ok(mut out) = prefix.canonicalize() {
            for part in &parts[keep..] {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other),
                }
            }
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_under_a_root_pass_and_others_do_not() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let inside = root.path().join("es.csv");
        let outside = other.path().join("secret.csv");
        std::fs::write(&inside, "x").unwrap();
        std::fs::write(&outside, "top secret").unwrap();
        let roots = DataRoots::new(&[root.path().to_path_buf()]).unwrap();
        assert_eq!(
            roots.check(&inside).unwrap(),
            inside.canonicalize().unwrap()
        );
        let refused = roots.check(&outside).unwrap_err();
        assert!(
            matches!(refused, DataRootError::Outside { .. }),
            "{refused}"
        );
        assert!(!refused.to_string().contains("top secret"));
        // `..` out of the root, and a symlink in the root pointing out of it.
        // (Both temporary directories share a parent.)
        let sneaky = root
            .path()
            .join("..")
            .join(other.path().file_name().unwrap())
            .join("secret.csv");
        assert!(matches!(
            roots.check(&sneaky),
            Err(DataRootError::Outside { .. })
        ));
        let link = root.path().join("link.csv");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert!(matches!(
            roots.check(&link),
            Err(DataRootError::Outside { .. })
        ));
    }

    #[test]
    fn a_missing_file_says_why_only_inside_the_roots() {
        let root = tempfile::tempdir().unwrap();
        let roots = DataRoots::new(&[root.path().to_path_buf()]).unwrap();
        assert!(matches!(
            roots.check(&root.path().join("nope.csv")),
            Err(DataRootError::Unreadable { .. })
        ));
        assert!(matches!(
            roots.check(Path::new("/definitely/not/here.csv")),
            Err(DataRootError::Outside { .. })
        ));
        assert!(matches!(
            roots.check(&root.path().join("../../etc/nope.csv")),
            Err(DataRootError::Outside { .. })
        ));
        // A directory link inside the root that leads out: a missing file
        // behind it is as outside as an existing one, and `..` after the
        // link is taken from where the link leads.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("there.csv"), "x").unwrap();
        let out = root.path().join("out");
        std::os::unix::fs::symlink(elsewhere.path(), &out).unwrap();
        for probe in ["there.csv", "not-there.csv", "../not-there.csv"] {
            assert!(
                matches!(
                    roots.check(&out.join(probe)),
                    Err(DataRootError::Outside { .. })
                ),
                "{probe}"
            );
        }
        std::fs::create_dir(root.path().join("d")).unwrap();
        assert!(matches!(
            roots.check(&root.path().join("d/../nope.csv")),
            Err(DataRootError::Unreadable { .. })
        ));
    }

    #[test]
    fn the_filesystem_root_allows_everything_and_missing_roots_are_errors() {
        let everything = DataRoots::new(&[PathBuf::from("/")]).unwrap();
        let anywhere = tempfile::NamedTempFile::new().unwrap();
        assert!(everything.check(anywhere.path()).is_ok());
        assert!(DataRoots::new(&[PathBuf::from("/no/such/dir")]).is_err());
    }
}
