//! Links libtorch into the plugin with an rpath and `--no-as-needed` (see tli-build-support).
fn main() {
    tli_build_support::link_libtorch();
}
