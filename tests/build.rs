//! Test binaries link libtorch through tli-host: same rpath and `--no-as-needed` as every artifact.
fn main() {
    tli_build_support::link_libtorch();
}
