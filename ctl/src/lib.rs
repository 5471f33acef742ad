//! roostctl as a library: a typed client of the control API ([`client`]) and
//! the CLI ([`cli`]). The wire types ([`api`]), the artifact format
//! ([`artifact`]) and the default paths ([`paths`]) are `roost_wire`'s, shared
//! with roostd, and re-exported here.

pub mod a2a;
pub mod cli;
pub mod client;
pub mod doctor;
pub use roost_jail::host;
pub mod trace;

pub use roost_wire::{api, artifact, paths};

pub use client::{Client, ClientError};
