//! Rebuilds when migrations change (they are embedded with
//! `sqlx::migrate!`), and generates the A2A gRPC binding from the
//! specification's `proto/a2a.proto` (and 0.3's, `proto/v03/a2a.proto`): prost messages with ProtoJSON serde
//! (pbjson, so a gRPC request becomes the same JSON the other bindings
//! read) and the tonic service. protox compiles the protos: no `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=../proto");
    // 1.0's `lf.a2a.v1`, and 0.3's `a2a.v1` (served beside it).
    let fds = protox::compile(["a2a.proto", "v03/a2a.proto"], ["../proto"])?;
    let bytes = prost::Message::encode_to_vec(&fds);
    // Code for A2A's own package only: the well-known types come from
    // pbjson-types, and the googleapis files are read for their options
    // (no A2A message uses a type of theirs).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .extern_path(".google.api", "::pbjson_types")
        .compile_fds(fds)?;
    pbjson_build::Builder::new()
        .register_descriptors(&bytes)?
        .ignore_unknown_fields()
        .build(&[".lf.a2a.v1", ".a2a.v1"])?;
    Ok(())
}
