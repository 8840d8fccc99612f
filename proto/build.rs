//! Compiles proto/tli/v1/*.proto with the vendored protoc (nothing to install
//! by hand) and writes the descriptor set that server reflection serves.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; the variable is read by prost-build below.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let files = [
        "tli/v1/training.proto",
        "tli/v1/plugins.proto",
        "tli/v1/worker.proto",
        "tli/v1/models.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("tli_v1_descriptor.bin"))
        .compile_protos(&files, &["."])?;
    Ok(())
}
