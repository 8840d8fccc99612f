//! Plugins dropped into a running host: rescans, versions side by side, restarts after an upgrade.
