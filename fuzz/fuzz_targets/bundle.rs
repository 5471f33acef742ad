//! An artifact bundle (zip) from a registry: the size, entry-name, link and
//! unpacked-size checks. Beyond "no panic": a bundle read is never larger
//! unpacked than four times the cap, its manifest parses again from the text
//! it was read from, and a bundle over the cap is refused before it is opened.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roost_wire::artifact::{ArtifactManifest, Bundle};

const MAX: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    match Bundle::read(data, "fuzz", MAX) {
        Ok(bundle) => {
            let unpacked = bundle.payload.len() as u64 + bundle.manifest_yaml.len() as u64;
            assert!(unpacked <= 4 * MAX, "unpacked {unpacked} bytes");
            let again = ArtifactManifest::parse(&bundle.manifest_yaml).expect("parses again");
            assert_eq!(format!("{again:?}"), format!("{:?}", bundle.manifest));
        }
        Err(_) => {}
    }
    // The same bytes under a cap they exceed: refused, whatever they hold.
    if !data.is_empty() {
        assert!(Bundle::read(data, "fuzz", data.len() as u64 - 1).is_err());
    }
});
