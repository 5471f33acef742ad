//! Test capsule: prints 20000 long lines to stdout, to exercise bounded log capture.

use std::io::Write;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "murmur:capsule/capsule@0.1.0",
    generate_all,
});

struct Capsule;

impl exports::murmur::capsule::run::Guest for Capsule {
    fn run() {
        // StdoutLock is line-buffered: one write per line reaches the host.
        let mut out = std::io::stdout().lock();
        for n in 1..=20000 {
            writeln!(
                out,
                "line {n} xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            )
            .expect("write stdout");
        }
        out.flush().expect("flush stdout");
    }
}

export!(Capsule);
