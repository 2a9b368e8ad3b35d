#![no_main]
//! `PUT /admin/models/{m}/slo` and `PUT /admin/log` bodies; log directives go on to tracing's
//! parser, as the binary's log filter takes them.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("admin_json", data, gateway::fuzzing::admin_json);
    // tracing's parser is held to no panic only: what it allocates compiling a filter is
    // not ours to bound.
    // Built as the binary's `log_filter` builds it: field values as literal text.
    if let Some(directives) = gateway::fuzzing::admin_log_filter(data) {
        let _ = tracing_subscriber::EnvFilter::builder()
            .with_regex(false)
            .parse(directives);
    }
});
