//! The `wants-http` test plugin: imports `wasi:http/outgoing-handler` through the ready-made
//! `wasip2` bindings (not moat's guest SDK), to show that such a component loads and that its
//! requests pass moat's network checks all the same.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, OutgoingRequest, Scheme};

moat_guest::generate!("wants-http");

struct WantsHttp;

impl Guest for WantsHttp {
    fn ok() -> String {
        "ok".into()
    }

    fn fetch(authority: String) -> Result<String, String> {
        let request = OutgoingRequest::new(Fields::new());
        request
            .set_scheme(Some(&Scheme::Http))
            .map_err(|()| "bad scheme".to_string())?;
        request
            .set_authority(Some(&authority))
            .map_err(|()| "bad authority".to_string())?;
        request
            .set_path_with_query(Some("/"))
            .map_err(|()| "bad path".to_string())?;
        let response = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
        response.subscribe().block();
        match response.get() {
            Some(Ok(Ok(response))) => Ok(format!("status {}", response.status())),
            other => Err(format!("no response: {other:?}")),
        }
    }
}

export!(WantsHttp);
