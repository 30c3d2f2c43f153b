use std::net::IpAddr;

use http::{HeaderName, HeaderValue};

use super::address::reserved;
use super::grant::parse_host;
use super::requests::check_method;
use super::*;

fn grants(list: &[&str]) -> Network {
    Network {
        grants: list.iter().map(|g| g.parse().unwrap()).collect(),
        ..Network::default()
    }
}

fn with_resolver(mut network: Network, table: &[(&str, &str)]) -> Network {
    network.resolver = Resolver::table(
        table
            .iter()
            .map(|(name, ip)| (name.to_string(), vec![ip.parse().unwrap()])),
    );
    network
}

async fn check(network: &Network, uri: &str) -> Result<Vec<SocketAddr>, String> {
    network
        .check_request(&uri.parse().unwrap(), "p")
        .await
        .map(|(_, addrs)| addrs)
        .map_err(|unsent| unsent.message().to_string())
}

#[test]
fn grants_parse_and_print() {
    for (text, printed) in [
        ("https://api.open-meteo.com", "https://api.open-meteo.com"),
        ("https://API.Open-Meteo.com/", "https://api.open-meteo.com"),
        ("*.wikipedia.org:443", "*.wikipedia.org:443"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://[::1]:*", "http://[::1]:*"),
    ] {
        let grant: NetworkGrant = text.parse().unwrap();
        assert_eq!(grant.to_string(), printed);
    }
    for (bad, expected) in [
        ("ftp://example.org", "scheme `ftp`"),
        ("https://example.org/path", "not a path"),
        ("example.org:99999", "not a number from 1 to 65535"),
        ("example.org:0", "not a number from 1 to 65535"),
        ("*.127.0.0.1", "goes with host names"),
        ("*.1", "not a canonical IP"),
        ("http://2130706433", "not a canonical IP"),
        ("http://0x7f.1", "not a canonical IP"),
        ("exa mple.org", "not a valid host name"),
        ("[::1", "without `]`"),
    ] {
        let error = bad.parse::<NetworkGrant>().unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{bad}: {error:#}");
    }
}

#[tokio::test]
async fn requests_must_match_scheme_host_and_port() {
    let network = with_resolver(
        grants(&[
            "https://api.example.org",
            "*.wiki.org:8443",
            "http://any.example.org:*",
        ]),
        &[
            ("api.example.org", "93.184.216.34"),
            ("en.wiki.org", "93.184.216.35"),
            ("any.example.org", "93.184.216.36"),
        ],
    );
    assert!(check(&network, "https://api.example.org/x").await.is_ok());
    assert!(check(&network, "https://API.example.org./x").await.is_ok());
    assert!(check(&network, "http://en.wiki.org:8443/").await.is_ok());
    assert!(check(&network, "https://en.wiki.org:8443/").await.is_ok());
    assert!(
        check(&network, "http://any.example.org:1234/")
            .await
            .is_ok()
    );
    for (uri, expected) in [
        (
            "http://api.example.org/",
            "api.example.org:80 denied: not granted to plugin \"p\"",
        ),
        (
            "https://api.example.org:444/",
            "api.example.org:444 denied: not granted",
        ),
        (
            "https://wiki.org:8443/",
            "wiki.org:8443 denied: not granted",
        ),
        (
            "https://evilwiki.org:8443/",
            "evilwiki.org:8443 denied: not granted",
        ),
        (
            "https://en.wiki.org/",
            "en.wiki.org:443 denied: not granted",
        ),
        (
            "https://evil.example:443/",
            "network access to evil.example:443 denied: not granted to plugin \"p\"",
        ),
    ] {
        let error = check(&network, uri).await.unwrap_err();
        assert!(error.contains(expected), "{uri}: {error}");
    }
}

#[tokio::test]
async fn local_addresses_need_a_grant_naming_them() {
    let network = with_resolver(
        grants(&[
            "http://127.0.0.1:8080",
            "http://*.rebind.test:*",
            "http://[::1]:9090",
        ]),
        &[
            ("a.rebind.test", "127.0.0.1"),
            ("b.rebind.test", "::ffff:169.254.169.254"),
        ],
    );
    assert_eq!(
        check(&network, "http://127.0.0.1:8080/").await.unwrap(),
        ["127.0.0.1:8080".parse().unwrap()]
    );
    assert!(
        check(&network, "http://[::ffff:127.0.0.1]:8080/")
            .await
            .is_ok()
    );
    assert!(check(&network, "http://[::1]:9090/").await.is_ok());
    for (uri, expected) in [
        (
            "http://a.rebind.test:8080/",
            "it resolves to 127.0.0.1, a loopback address",
        ),
        (
            "http://b.rebind.test:80/",
            "it resolves to 169.254.169.254, a link-local address",
        ),
        ("http://127.0.0.1:8081/", "not granted"),
        ("http://2130706433:8080/", "not a canonical IP address"),
        ("http://0177.0.0.1:8080/", "not a canonical IP address"),
    ] {
        let error = check(&network, uri).await.unwrap_err();
        assert!(error.contains(expected), "{uri}: {error}");
    }
    let any = with_resolver(grants(&["http://*.test:*"]), &[("x.test", "10.1.2.3")]);
    let error = check(&any, "http://x.test/").await.unwrap_err();
    assert!(error.contains("10.1.2.3, a private address"), "{error}");
}

#[test]
fn reserved_addresses_are_recognised() {
    for ip in [
        "0.0.0.0",
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "169.254.169.254",
        "224.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "::",
        "::1",
        "fc00::1",
        "fd12::1",
        "fe80::1",
        "ff02::1",
        "64:ff9b::7f00:1",
        "2002:7f00:1::",
        "2001:db8::1",
        "::7f00:1",
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        assert!(reserved(ip.to_canonical()).is_some(), "{ip}");
    }
    assert!(reserved("::ffff:127.0.0.1".parse::<IpAddr>().unwrap().to_canonical()).is_some());
    for ip in [
        "93.184.216.34",
        "1.1.1.1",
        "2606:4700::1111",
        "64:ff9b::101:101",
        "172.32.0.1",
    ] {
        assert_eq!(reserved(ip.parse().unwrap()), None, "{ip}");
    }
}

#[test]
fn sockets_need_ip_literal_grants() {
    let network = grants(&["http://127.0.0.1:8080", "https://example.org"]);
    let at = |s: &str| s.parse::<SocketAddr>().unwrap();
    assert!(
        network
            .check_socket(at("127.0.0.1:8080"), SocketAddrUse::TcpConnect, "p")
            .is_ok()
    );
    assert!(
        network
            .check_socket(at("0.0.0.0:0"), SocketAddrUse::TcpBind, "p")
            .is_ok()
    );
    let error = network
        .check_socket(at("127.0.0.1:8081"), SocketAddrUse::TcpConnect, "p")
        .unwrap_err();
    assert!(
        error.contains("network access to 127.0.0.1:8081 denied"),
        "{error}"
    );
    assert!(
        network
            .check_socket(at("93.184.216.34:443"), SocketAddrUse::TcpConnect, "p")
            .is_err()
    );
    assert!(
        network
            .check_socket(at("0.0.0.0:8080"), SocketAddrUse::TcpListen, "p")
            .is_err()
    );
    assert!(
        network
            .check_socket(at("0.0.0.0:0"), SocketAddrUse::UdpBind, "p")
            .is_err()
    );
}

fn injecting(to: &str) -> Network {
    Network {
        inject: vec![Injection {
            to: Injection::target(to).unwrap(),
            header: HeaderName::from_static("authorization"),
            value: Injected::Fixed(HeaderValue::from_static("Bearer t")),
        }],
        ..Network::default()
    }
}

/// The headers a request to `uri` leaves with.
fn injected(network: &Network, uri: &str) -> http::HeaderMap {
    let uri: http::Uri = uri.parse().unwrap();
    let host = parse_host(uri.host().unwrap()).unwrap();
    let scheme = match uri.scheme_str() {
        Some("https") => Scheme::Https,
        _ => Scheme::Http,
    };
    let port = uri.port_u16().unwrap_or(scheme.default_port());
    let mut headers = http::HeaderMap::new();
    inject(network, &Target { scheme, host, port }, &mut headers).unwrap();
    headers
}

fn inject(
    network: &Network,
    target: &Target,
    headers: &mut http::HeaderMap,
) -> Result<Added, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(network.inject(target, headers, asking(None)))
        .map_err(|denial| denial.shown)
}

#[test]
fn injections_match_their_host_only() {
    let network = injecting("api.example.org");
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", HeaderValue::from_static("guest's own"));
    let target = Target {
        scheme: Scheme::Https,
        host: Host::Name("api.example.org".into()),
        port: 443,
    };
    inject(&network, &target, &mut headers).unwrap();
    assert_eq!(headers["authorization"], "Bearer t");
    assert!(injected(&network, "https://evil.example/").is_empty());
    assert!(!format!("{network:?}").contains("Bearer t"));
}

#[test]
fn injections_go_over_https_unless_their_target_names_another_scheme() {
    let network = injecting("api.example.org");
    assert!(!injected(&network, "https://api.example.org/").is_empty());
    assert!(!injected(&network, "https://api.example.org:443/").is_empty());
    for uri in [
        "http://api.example.org/",
        "http://api.example.org:443/",
        "https://api.example.org:8443/",
    ] {
        assert!(injected(&network, uri).is_empty(), "{uri} got the header");
    }
    let loopback = injecting("http://127.0.0.1:8080");
    assert!(!injected(&loopback, "http://127.0.0.1:8080/").is_empty());
    assert!(injected(&loopback, "http://127.0.0.1:8081/").is_empty());
    assert!(injected(&loopback, "https://127.0.0.1:8080/").is_empty());
    let any_port = injecting("https://*.example.org:*");
    assert!(!injected(&any_port, "https://a.example.org:9/").is_empty());
    assert!(injected(&any_port, "http://a.example.org:9/").is_empty());
}

#[test]
fn an_injection_must_be_able_to_travel_under_some_grant() {
    let travels =
        |to: &str, grant: &str| injecting(to).inject[0].can_travel_under(&grant.parse().unwrap());
    assert!(travels("api.example.org", "api.example.org"));
    assert!(travels("api.example.org", "https://*.example.org"));
    assert!(travels("*.example.org", "https://api.example.org"));
    assert!(travels("127.0.0.1", "127.0.0.1:*"));
    assert!(travels("http://127.0.0.1:8080", "http://127.0.0.1:8080"));
    assert!(!travels("api.example.org", "http://api.example.org"));
    assert!(!travels("api.example.org", "api.example.org:8443"));
    assert!(!travels("127.0.0.1", "http://127.0.0.1:8080"));
    assert!(!travels("http://127.0.0.1:8080", "https://127.0.0.1:8080"));
    assert!(!travels("api.example.org", "other.example.org"));
}

#[test]
fn trace_and_connect_are_never_sent() {
    for method in [http::Method::TRACE, http::Method::CONNECT] {
        let error = check_method(&method, "p").unwrap_err();
        assert!(
            error.contains(&format!("the {method} method is never allowed")),
            "{error}"
        );
    }
    for method in [http::Method::GET, http::Method::POST, http::Method::DELETE] {
        assert!(check_method(&method, "p").is_ok(), "{method}");
    }
}

#[tokio::test]
async fn a_granted_name_that_does_not_resolve_fails_without_a_denial() {
    let network = with_resolver(
        grants(&["https://*.test"]),
        &[("known.test", "203.0.113.7")],
    );
    let unsent = network
        .check_request(&"https://unknown.test/".parse().unwrap(), "p")
        .await
        .unwrap_err();
    let Unsent::NoAddress(message) = unsent else {
        panic!("a denial: {unsent:?}");
    };
    assert!(
        message.starts_with("network access to unknown.test:443 failed: resolving"),
        "{message}"
    );
    // What is not granted stays a denial, resolvable or not.
    let denied = network
        .check_request(&"https://unknown.example/".parse().unwrap(), "p")
        .await
        .unwrap_err();
    assert!(matches!(denied, Unsent::Denied(_)), "{denied:?}");
}

/// What a request of a call with `credentials` and no client may use.
fn asking(credentials: Option<&dyn CallCredentials>) -> Asking<'_> {
    static NO_INPUT: std::sync::OnceLock<PendingInput> = std::sync::OnceLock::new();
    Asking {
        credentials,
        client: None,
        pending: NO_INPUT.get_or_init(PendingInput::default),
    }
}

/// Credentials that answer for one caller.
struct Caller(&'static str);

impl CallCredentials for Caller {
    fn get<'a>(
        &'a self,
        source: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, Missing>> + Send + 'a>>
    {
        Box::pin(async move {
            match source {
                "tracker" => Ok(format!("token-of-{}", self.0)),
                "consent" => Err(Missing::Consent(crate::sandbox::host::Question {
                    key: "moat:consent:consent".into(),
                    method: "elicitation/create".into(),
                    params: serde_json::json!({
                        "mode": "url", "url": "https://moat.example/oauth/consent/SECRET"
                    }),
                    form: None,
                })),
                _ => Err(Missing::Refused(format!(
                    "no credential \"{source}\" for {}",
                    self.0
                ))),
            }
        })
    }

    fn consented<'a>(
        &'a self,
        _: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        Box::pin(async { Err("no consent here".to_string()) })
    }

    fn refused<'a>(
        &'a self,
        _: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async {})
    }
}

fn injecting_credential(source: &str) -> Network {
    Network {
        inject: vec![Injection {
            to: Injection::target("api.example.org").unwrap(),
            header: HeaderName::from_static("authorization"),
            value: Injected::Caller {
                source: source.into(),
                before: "Bearer ".into(),
                after: String::new(),
            },
        }],
        ..Network::default()
    }
}

#[tokio::test]
async fn a_callers_credential_goes_in_for_that_caller_only() {
    let network = injecting_credential("tracker");
    let target = Target {
        scheme: Scheme::Https,
        host: Host::Name("api.example.org".into()),
        port: 443,
    };
    for who in ["alice", "bob"] {
        let mut headers = http::HeaderMap::new();
        let added = network
            .inject(&target, &mut headers, asking(Some(&Caller(who))))
            .await
            .unwrap();
        assert_eq!(headers["authorization"], format!("Bearer token-of-{who}"));
        assert!(headers["authorization"].is_sensitive());
        assert_eq!(
            added,
            Added {
                secrets: vec![Secret::new(format!("token-of-{who}").into_bytes()).unwrap()],
                sources: vec!["tracker".into()],
            }
        );
    }
    // Another host gets nothing, and asks for nothing.
    let elsewhere = Target {
        host: Host::Name("evil.example".into()),
        ..target
    };
    let mut headers = http::HeaderMap::new();
    let none = network
        .inject(&elsewhere, &mut headers, asking(None))
        .await
        .unwrap();
    assert!(headers.is_empty() && none == Added::default());
}

#[tokio::test]
async fn a_request_without_its_callers_credential_is_not_sent() {
    let target = Target {
        scheme: Scheme::Https,
        host: Host::Name("api.example.org".into()),
        port: 443,
    };
    let mut headers = http::HeaderMap::new();
    let no_caller = injecting_credential("tracker")
        .inject(&target, &mut headers, asking(None))
        .await
        .unwrap_err()
        .shown;
    assert!(
        no_caller.contains("given per caller, and this call has none"),
        "{no_caller}"
    );
    let unknown = injecting_credential("wiki")
        .inject(&target, &mut headers, asking(Some(&Caller("alice"))))
        .await
        .unwrap_err();
    assert_eq!(
        unknown,
        Denial::from("no credential \"wiki\" for alice".to_string())
    );
    assert!(headers.is_empty());
}

#[tokio::test]
async fn a_consent_link_is_shown_to_the_caller_and_recorded_only_as_its_digest() {
    let target = Target {
        scheme: Scheme::Https,
        host: Host::Name("api.example.org".into()),
        port: 443,
    };
    let mut headers = http::HeaderMap::new();
    let denial = injecting_credential("consent")
        .inject(&target, &mut headers, asking(Some(&Caller("alice"))))
        .await
        .unwrap_err();
    let link = "https://moat.example/oauth/consent/SECRET";
    assert!(
        denial.shown.contains(&format!("open {link} ,")),
        "{denial:?}"
    );
    assert!(!denial.recorded.contains("SECRET"), "{denial:?}");
    let digest = redact::digest(link);
    assert!(
        denial.recorded.contains(&format!(
            "open the link given to the caller (sha256 {digest})"
        )),
        "{denial:?}"
    );
    // What a call records is what logs and the audit get.
    let denials = Denials::default();
    denials.record(denial.map(|d| format!("denied: {d}")));
    let taken = denials.take();
    assert!(taken[0].shown.contains("SECRET") && !taken[0].recorded.contains("SECRET"));
}
