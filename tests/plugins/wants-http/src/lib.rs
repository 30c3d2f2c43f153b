//! The `wants-http` test plugin: imports `wasi:http/outgoing-handler`, which moat does not offer,
//! so loading it must fail with a message naming that import.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

moat_guest::generate!("wants-http");

struct WantsHttp;

impl Guest for WantsHttp {
    fn fetch(authority: String) -> Result<String, String> {
        let request = OutgoingRequest::new(Fields::new());
        request
            .set_scheme(Some(&Scheme::Http))
            .map_err(|()| "bad scheme".to_string())?;
        request
            .set_authority(Some(&authority))
            .map_err(|()| "bad authority".to_string())?;
        let response = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
        response.subscribe().block();
        match response.get() {
            Some(Ok(Ok(response))) => Ok(format!("status {}", response.status())),
            other => Err(format!("no response: {other:?}")),
        }
    }
}

export!(WantsHttp);
