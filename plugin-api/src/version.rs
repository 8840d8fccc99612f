//! The plugin-API version and the rule by which a host accepts a plugin.
//!
//! The version is this crate's own semver. A host accepts a plugin built
//! against the same major and a minor no newer than its own: a newer host
//! knows every field an older plugin fills in (prefix types only grow at the
//! end), an older host cannot know what a newer plugin relies on.

use semver::Version;

/// The plugin-API version of this build of the crate.
pub const PLUGIN_API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Name of the exported symbol holding the NUL-terminated API version string
/// (a `[u8; 32]`). Read with plain `dlsym` before any abi_stable checks, so an
/// incompatible plugin gets a version message rather than a layout diff.
pub const VERSION_SYMBOL: &[u8] = b"tli_plugin_api_version\0";

/// Builds the 32-byte marker for [`VERSION_SYMBOL`] at compile time.
pub const fn version_marker(version: &str) -> [u8; 32] {
    let bytes = version.as_bytes();
    assert!(bytes.len() < 32, "plugin API version string too long");
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// Why a plugin's declared API version is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incompatibility {
    Unparsable { declared: String, reason: String },
    MajorDiffers { declared: Version, host: Version },
    NewerMinor { declared: Version, host: Version },
}

impl std::fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unparsable { declared, reason } => write!(
                f,
                "declares plugin API version {declared:?}, which is not semver ({reason})"
            ),
            Self::MajorDiffers { declared, host } => write!(
                f,
                "built against plugin API {declared}, but this host speaks plugin API {host} \
                 (major versions differ); rebuild the plugin against tli-plugin-api {}.x",
                host.major
            ),
            Self::NewerMinor { declared, host } => write!(
                f,
                "built against plugin API {}.{}, this host speaks {}.{}; \
                 upgrade the host or rebuild the plugin against tli-plugin-api {}.{}",
                declared.major, declared.minor, host.major, host.minor, host.major, host.minor
            ),
        }
    }
}

/// Checks a plugin's declared API version against `host_version`.
pub fn check_compatible(declared: &str, host_version: &str) -> Result<Version, Incompatibility> {
    let host = Version::parse(host_version).map_err(|e| Incompatibility::Unparsable {
        declared: host_version.to_string(),
        reason: e.to_string(),
    })?;
    let plugin = Version::parse(declared).map_err(|e| Incompatibility::Unparsable {
        declared: declared.to_string(),
        reason: e.to_string(),
    })?;
    if plugin.major != host.major {
        return Err(Incompatibility::MajorDiffers {
            declared: plugin,
            host,
        });
    }
    if plugin.minor > host.minor {
        return Err(Incompatibility::NewerMinor {
            declared: plugin,
            host,
        });
    }
    Ok(plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_major_older_or_equal_minor_is_accepted() {
        assert!(check_compatible("1.0.0", "1.0.0").is_ok());
        assert!(check_compatible("1.0.7", "1.2.0").is_ok());
        assert!(check_compatible("1.1.0", "1.2.3").is_ok());
    }

    #[test]
    fn other_major_or_newer_minor_is_refused() {
        let e = check_compatible("2.0.0", "1.5.0").unwrap_err();
        assert!(matches!(e, Incompatibility::MajorDiffers { .. }));
        assert!(e
            .to_string()
            .contains("rebuild the plugin against tli-plugin-api 1.x"));
        let e = check_compatible("1.6.0", "1.5.0").unwrap_err();
        assert!(matches!(e, Incompatibility::NewerMinor { .. }));
        let e = check_compatible("1.1.0", "1.0.0").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("built against plugin API 1.1, this host speaks 1.0;"));
        let e = check_compatible("one", "1.5.0").unwrap_err();
        assert!(matches!(e, Incompatibility::Unparsable { .. }));
    }

    #[test]
    fn marker_is_nul_terminated() {
        let m = version_marker("1.2.3");
        assert_eq!(&m[..6], b"1.2.3\0");
    }
}
