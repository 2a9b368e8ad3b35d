#![no_main]
//! `gateway::fuzzing::content_coding`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("content_coding", data, gateway::fuzzing::content_coding);
});
