//! The addresses of the host's own networks, which no grant reaches unless it names them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address of the host's own networks (or no network at all) `ip` is, or `None`
/// for an ordinary public address. `ip` is canonical: IPv4-mapped IPv6 is IPv4 already.
pub(super) fn reserved(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(ip) => reserved_v4(ip).map(str::to_string),
        IpAddr::V6(ip) => reserved_v6(ip),
    }
}

fn reserved_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "an unspecified address",
        (127, ..) => "a loopback address",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a shared (carrier-grade NAT) address",
        (169, 254, _) => "a link-local address",
        (192, 0, 0) => "an IETF protocol address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, ..) => "a multicast address",
        (240..=255, ..) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn reserved_v6(ip: Ipv6Addr) -> Option<String> {
    let segments = ip.segments();
    let embedded_v4 = |high: u16, low: u16| Ipv4Addr::from(((high as u32) << 16) | low as u32);
    let inner =
        |what: &str, v4: Ipv4Addr| reserved_v4(v4).map(|kind| format!("{what} for {v4}, {kind}"));
    let kind = match segments {
        [0, 0, 0, 0, 0, 0, 0, 0] => "an unspecified address",
        [0, 0, 0, 0, 0, 0, 0, 1] => "a loopback address",
        [0, 0, 0, 0, 0, 0, ..] => "an IPv4-compatible address (deprecated)",
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => {
            return inner("a NAT64 address", embedded_v4(high, low));
        }
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64 address",
        [0x2002, high, low, ..] => return inner("a 6to4 address", embedded_v4(high, low)),
        [0x2001, 0, ..] => "a Teredo address",
        [0x2001, 0xdb8, ..] => "a documentation address",
        [0x100, 0, 0, 0, ..] => "a discard-only address",
        [first, ..] if first & 0xfe00 == 0xfc00 => "a unique local (private) address",
        [first, ..] if first & 0xffc0 == 0xfe80 => "a link-local address",
        [first, ..] if first & 0xffc0 == 0xfec0 => "a site-local address (deprecated)",
        [first, ..] if first & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    };
    Some(kind.to_string())
}
