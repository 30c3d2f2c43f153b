//! Tokens a hostile client could send, against a real authorization server on loopback
//! ([`issuer`]): what each is refused for, and what it costs the issuer.

mod issuer;
mod jwt;
mod metadata;
mod opaque;
