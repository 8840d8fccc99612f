//! An rpath to libtorch and `--no-as-needed` for this crate's test binaries (see tli-build-support),
//! and compiles the CUDA memory shim (`cuda_shim/shim.cpp`, see
//! `src/orchestrator/cuda.rs`) when libtorch has CUDA.
//!
//! The shim uses only libtorch's headers and libraries (the PyPI CUDA runtime
//! wheel ships `cuda_runtime_api.h` without the `crt/` headers it includes, so
//! the CUDA headers cannot be compiled without nvcc's package). Its libraries
//! live in libtorch's `lib` directory, which every tli artifact already has an
//! rpath to; libtorch's CUDA libraries find libcudart through their own RPATH.
//! Without a CUDA libtorch (no `libtorch_cuda.so`, no `libc10_cuda.so`, or no
//! headers) nothing is compiled and `cfg(tli_no_cuda_shim)` is set, so
//! `cuda.rs` reports "no CUDA support in this build".

use std::path::PathBuf;

fn main() {
    tli_build_support::link_libtorch();

    println!("cargo::rustc-check-cfg=cfg(tli_no_cuda_shim)");
    println!("cargo:rerun-if-changed=cuda_shim/shim.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");

    match cuda_shim_inputs() {
        Ok(inputs) => compile_shim(&inputs),
        Err(why) => {
            println!("cargo:warning=CUDA memory shim not built ({why}); tli will report no CUDA");
            println!("cargo:rustc-cfg=tli_no_cuda_shim");
        }
    }
}

/// What the shim needs from libtorch.
struct ShimInputs {
    lib_dir: PathBuf,
    include_dirs: Vec<PathBuf>,
}

/// Finds libtorch's include dirs and CUDA libraries, or says what is missing.
fn cuda_shim_inputs() -> Result<ShimInputs, String> {
    let lib_dir = std::env::var_os("DEP_TCH_LIBTORCH_LIB")
        .map(PathBuf::from)
        .ok_or("DEP_TCH_LIBTORCH_LIB is not set")?;
    for lib in ["libtorch_cuda.so", "libc10_cuda.so"] {
        if !lib_dir.join(lib).exists() {
            return Err(format!(
                "{} has no {lib}: a CPU-only libtorch",
                lib_dir.display()
            ));
        }
    }
    // `lib` and `include` are siblings in libtorch (and in the torch package).
    let root = lib_dir
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", lib_dir.display()))?;
    let include = root.join("include");
    let include_dirs = vec![include.clone(), include.join("torch/csrc/api/include")];
    for header in [
        "c10/core/CachingDeviceAllocator.h",
        "ATen/Context.h",
        "ATen/detail/CUDAHooksInterface.h",
    ] {
        if !include.join(header).exists() {
            return Err(format!(
                "libtorch header {} is missing",
                include.join(header).display()
            ));
        }
    }
    Ok(ShimInputs {
        lib_dir,
        include_dirs,
    })
}

fn compile_shim(inputs: &ShimInputs) {
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .includes(&inputs.include_dirs)
        // cc's default -Wall -Wextra floods the build with libtorch header
        // warnings; keep -Wall (clean) and never -Werror.
        .warnings(false)
        .flag("-Wall")
        .file("cuda_shim/shim.cpp")
        .compile("tli_cuda_shim");
    // The shim's own references: libtorch_cuda (device properties), libc10
    // (the allocator registry), libtorch_cpu (CUDA hooks and lazy init), and
    // libc10_cuda (which registers the CUDA caching allocator). torch-sys
    // links most of these too; naming them here keeps the shim
    // self-contained. They are all in the lib dir every artifact has an
    // rpath to (tli-build-support).
    println!(
        "cargo:rustc-link-search=native={}",
        inputs.lib_dir.display()
    );
    for lib in ["torch_cuda", "c10_cuda", "torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}
