//! roost-jail: the tool jail helper as a small binary of its own, linking
//! only this crate (roostd's own binary can play the same part, but it is
//! large and slow to exec). Invoked by roostd as
//! `roost-jail __roost-jail <spec-json> -- <program> [args…]`; see the crate docs.

fn main() {
    std::process::exit(roost_jail::helper_main(std::env::args_os().collect()));
}
