//! Compiles proto/quire/v1/*.proto with protox (a pure-Rust protobuf compiler), so
//! building quire never needs a `protoc` install.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from("proto");
    let files = [
        "quire/v1/common.proto",
        "quire/v1/control.proto",
        "quire/v1/bookie.proto",
        "quire/v1/metadata.proto",
        "quire/v1/frame.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed=proto/{f}");
    }
    let fds = protox::compile(files, [&root])?;
    let mut config = prost_build::Config::new();
    // Payloads and opaque blobs decode as `Bytes` slices of the received frame: zero copies.
    config.bytes(["."]);
    config.compile_fds(fds)?;
    Ok(())
}
