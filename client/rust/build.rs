// SPDX-License-Identifier: Apache-2.0
//! Links libweightd: from $WEIGHTD_LIB_DIR when set (weightd's CMake build sets it to its own
//! build tree and the library is found there at run time too), else from the system's library
//! path (an installed libweightd0). std only: no pkg-config crate.
use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=WEIGHTD_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(dir) = env::var_os("WEIGHTD_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = dir.to_string_lossy().into_owned();
        println!("cargo:rustc-link-search=native={dir}");
        // Tests, doc-tests and examples run from the build tree without LD_LIBRARY_PATH.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    println!("cargo:rustc-link-lib=dylib=weightd");
}
