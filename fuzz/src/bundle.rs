//! An artifact bundle (zip) from a registry: the size, entry-name, link and
//! unpacked-size checks. Beyond "no panic": a bundle read is never larger
//! unpacked than four times the cap, its manifest parses again from the text
//! it was read from, and a bundle over the cap is refused before it is opened.

use roost_wire::artifact::{ArtifactManifest, Bundle};

const MAX: u64 = 1 << 20;

/// One input.
pub fn run(data: &[u8]) {
    if let Ok(bundle) = Bundle::read(data, "fuzz", MAX) {
        let unpacked = bundle.payload.len() as u64 + bundle.manifest_yaml.len() as u64;
        assert!(unpacked <= 4 * MAX, "unpacked {unpacked} bytes");
        let again = ArtifactManifest::parse(&bundle.manifest_yaml).expect("parses again");
        assert_eq!(format!("{again:?}"), format!("{:?}", bundle.manifest));
    }
    // The same bytes under a cap they exceed: refused, whatever they hold.
    if !data.is_empty() {
        assert!(Bundle::read(data, "fuzz", data.len() as u64 - 1).is_err());
    }
}
