//! roostctl as a library: the control API's wire types ([`api`]), a typed client
//! ([`client`]), the shared default paths ([`paths`]) and the CLI ([`cli`]).
//!
//! roostd depends on this crate for [`api`] and [`paths`], so the wire types have
//! exactly one definition, and for [`artifact`], the bundle, lock and registry
//! layout that `roostctl publish` writes and staging reads.

pub mod a2a;
pub mod api;
pub mod artifact;
pub mod cli;
pub mod client;
pub mod doctor;
pub use roost_jail::host;
pub mod paths;
pub mod trace;

pub use client::{Client, ClientError};
