//! The fuzz target of `moat_fuzz::metadata`, which says what it feeds and checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    contain_decoder_panics();
    moat_fuzz::metadata::check(data);
});

/// libfuzzer-sys aborts at any panic, before it unwinds. wit-parser's decoder asserts on some
/// malformed packages, and moat contains those (`decode_untrusted`): let a panic raised in
/// wit-parser unwind. One that moat does not contain still reaches libfuzzer-sys's own
/// `catch_unwind` around the input, which aborts as before; any other panic aborts at once.
fn contain_decoder_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_wit_parser = info
                .location()
                .is_some_and(|at| at.file().contains("wit-parser"));
            if !in_wit_parser {
                abort(info);
            }
        }));
    });
}
