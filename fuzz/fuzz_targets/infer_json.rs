#![no_main]
//! `gateway::fuzzing::infer_json`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("infer_json", data, gateway::fuzzing::infer_json);
});
