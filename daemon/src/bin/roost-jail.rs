//! roost-jail: the tool jail helper as a small binary of its own (roostd's own
//! binary can play the same part, but it is large and slow to exec). Invoked
//! by roostd as `roost-jail __roost-jail <spec-json> -- <program> [args…]`;
//! see `roostd::sandbox`.

fn main() {
    std::process::exit(roostd::sandbox::helper_main(std::env::args_os().collect()));
}
